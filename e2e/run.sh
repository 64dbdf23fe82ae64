#!/usr/bin/env bash
# Usage: e2e/run.sh --kubelet ours|upstream --suite SUITE [--nodes 1|2] [--parallel N]
#                   [--artifacts DIR] [--no-results] [--results-as NAME] [--bed 1|2]
#        e2e/run.sh --down [--bed 1|2]
#
# Runs the upstream v1.20.2 e2e suite (e2e.test with ginkgo) against our kubelet or the upstream
# kubelet v1.20.2, on this machine, from nothing, and leaves the machine as it found it.
#
#   --kubelet ours|upstream   the kubelet on every node: ours (cargo build --release, or
#                             $KRS_E2E_KUBELET) or upstream's, with the same flags plus
#                             --container-runtime=remote
#   --suite SUITE             node-conformance  [NodeConformance], skipping [Flaky] [Slow]
#                                               [Serial] [Disruptive] (upstream's node conformance)
#                             conformance       [Conformance], skipping [Disruptive] [Flaky]
#                                               (a certified-conformance run: [Slow] and [Serial]
#                                               run too)
#                             quick             the [NodeConformance] specs of e2e/quick.txt that
#                                               pass on our kubelet today, about 2 minutes (CI)
#                             storage           the [sig-storage] specs of volumes that need no
#                                               outside server, image or host access (In-tree
#                                               Volumes [Driver: hostPath|hostPathSymlink],
#                                               HostPath, PV Protection), skipping
#                                               [Disruptive] [Flaky]; e2e/skips.md says why the
#                                               local driver's are not among them
#                             focus:REGEX       the specs REGEX matches, skipping [Disruptive]
#                             Every suite also skips the specs e2e/skips.md names (DNS,
#                             registries): see there.
#   --nodes 1|2               nodes (kubelets) in the cluster (default: 2 for conformance, else 1)
#   --parallel N              ginkgo nodes (default 1); with N > 1 the [Serial] specs of the
#                             suite run afterwards, alone, as upstream's parallel runs do
#   --artifacts DIR           logs, junit and summaries of this run (default
#                             /var/tmp/kubelet-rs-e2e/<kubelet>-<suite>, emptied first)
#   --no-results              do not copy a node-conformance, conformance or storage run to
#                             e2e/results/
#   --results-as NAME         copy it to e2e/results/NAME/<kubelet>/ instead, under that suite
#                             name (a run of another node shape: e2e/vm/run.sh conformance
#                             writes node-conformance-cgroupv2)
#   --hold                    after the suite, keep the bed up until Ctrl-C or SIGTERM (prints
#                             how to reach it); for looking into failures by hand
#   --down                    only take down what a killed run left (nodes, network, cluster)
#   --bed 1|2                 which of two beds (default 1): bed 2 has other names and
#                             addresses (e2e/lib.sh), so two runs can go at once, e.g. ours and
#                             upstream's side by side; its artifacts folder ends in -bed2
#
# What it does: builds what is missing (hack/upstream/build.sh: e2e.test, ginkgo, kubectl,
# kube-proxy, the upstream kubelet, the control plane; our kubelet with cargo; the test images
# with e2e/images.sh), starts the control plane "e2e" (hack/cluster/up.sh e2e, its own ports,
# with --enable-aggregator-routing so that the apiserver reaches webhooks and aggregated API
# servers at their pods' addresses), sets up the nodes (e2e/lib.sh describes the network; each
# node runs e2e/node.sh in its own network, mount and UTS namespaces with its own containerd,
# kubelet, kube-proxy, cgroup root and /var/log/pods), waits for them to be Ready, runs ginkgo
# in a client namespace of its own (no resolver, no way out of the machine), and writes junit
# files and a summary (passed / failed / skipped per SIG area) to the artifacts
# folder; full node-conformance, conformance and storage runs go to e2e/results/<suite>/<kubelet>/ and
# e2e/compare.sh then merges ours and upstream's there. On exit, Ctrl-C included, it stops every
# process it started, deletes the namespaces, links, routes and iptables rules it made, and
# purges the containerd instances, the nodes' folders and cgroups and the cluster.
#
# Exit status: 0 if no selected spec failed, 1 if some failed, 2 for usage errors; other
# failures (the bed did not come up) exit 1 with an error message.
# Env: CARGO_TARGET_DIR (default /var/cache/kubelet-rs/target), KRS_E2E_KUBELET (our kubelet
# binary: skips the cargo build), KRS_NODE_IP (the machine's address, default `hostname -I`).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
# lib.sh derives every name and address from the bed: find --bed before sourcing it.
for ((arg = 1; arg <= $#; arg++)); do
	case "${!arg}" in
	--bed=*) KRS_E2E_BED="${!arg#--bed=}" ;;
	--bed)
		next=$((arg + 1))
		KRS_E2E_BED="${!next:-}"
		;;
	esac
done
unset arg next
# shellcheck source=e2e/lib.sh
source "$HERE/lib.sh"
# shellcheck source=hack/cluster/lib.sh
source "$KRS_E2E_REPO/hack/cluster/lib.sh"

BIN="$KRS_E2E_UPSTREAM_BIN"
RUN_STATE="$KRS_E2E_RUN_STATE"
NODE_TIMEOUT_S=600
TAGS_NODE_CONFORMANCE='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]'
TAGS_CONFORMANCE='\[Disruptive\]|\[Flaky\]'
TAGS_STORAGE='\[Disruptive\]|\[Flaky\]'
TAGS_FOCUS='\[Disruptive\]'

KIND=""
SUITE=""
NODES=""
PARALLEL=1
ARTIFACTS=""
RESULTS=1
RESULTS_AS=""
HOLD=0
DOWN_ONLY=0
GINKGO_PID=""
KUBELET_SHA256=""
KUBELET_COMMIT=""
HARNESS_COMMIT=""
BED_UP=0

usage() { sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kubelet | --suite | --nodes | --parallel | --artifacts | --results-as | --bed)
			[[ $# -ge 2 ]] || {
				usage >&2
				exit 2
			}
			case "$1" in
			--kubelet) KIND="$2" ;;
			--suite) SUITE="$2" ;;
			--nodes) NODES="$2" ;;
			--parallel) PARALLEL="$2" ;;
			--artifacts) ARTIFACTS="$2" ;;
			--results-as) RESULTS_AS="$2" ;;
			--bed) ;; # read before lib.sh was sourced
			esac
			shift 2
			;;
		--kubelet=* | --suite=* | --nodes=* | --parallel=* | --artifacts=* | --results-as=* | --bed=*)
			local key="${1%%=*}" value="${1#*=}"
			shift
			set -- "$key" "$value" "$@"
			;;
		--no-results)
			RESULTS=0
			shift
			;;
		--hold)
			HOLD=1
			shift
			;;
		--down)
			DOWN_ONLY=1
			shift
			;;
		-h | --help)
			usage
			exit 0
			;;
		*)
			usage >&2
			e2e_die "unknown argument: $1"
			;;
		esac
	done
	((DOWN_ONLY)) && return 0
	[[ "$KIND" == ours || "$KIND" == upstream ]] || {
		usage >&2
		exit 2
	}
	case "$SUITE" in
	node-conformance | quick | storage) NODES="${NODES:-1}" ;;
	conformance) NODES="${NODES:-2}" ;;
	focus:?*) NODES="${NODES:-1}" ;;
	*)
		usage >&2
		exit 2
		;;
	esac
	[[ "$NODES" =~ ^[12]$ ]] || e2e_die "--nodes must be 1 or 2"
	[[ "$PARALLEL" =~ ^[1-9][0-9]?$ ]] || e2e_die "--parallel must be a number from 1 to 99"
	[[ -z "$RESULTS_AS" || "$RESULTS_AS" =~ ^[a-z0-9][a-z0-9-]*$ ]] ||
		e2e_die "--results-as takes a folder name of a-z, 0-9 and -"
	local label="${SUITE%%:*}"
	local bed=""
	[[ "$KRS_E2E_BED" == 1 ]] || bed="-bed$KRS_E2E_BED"
	ARTIFACTS="${ARTIFACTS:-/var/tmp/kubelet-rs-e2e/$KIND-$label$bed}"
}

# --- what the suite runs ---------------------------------------------------------------------

quick_names() {
	grep -v '^[[:space:]]*\(#\|$\)' "$HERE/quick.txt"
}

suite_regexes() {
	case "$SUITE" in
	node-conformance)
		FOCUS='\[NodeConformance\]'
		TAG_SKIP="$TAGS_NODE_CONFORMANCE"
		;;
	conformance)
		FOCUS='\[Conformance\]'
		TAG_SKIP="$TAGS_CONFORMANCE"
		;;
	quick)
		quick_names >"$ARTIFACTS/expected-names.txt"
		FOCUS="$(e2e_names_regex <"$ARTIFACTS/expected-names.txt")" || e2e_die "e2e/quick.txt lists no spec"
		TAG_SKIP="$TAGS_NODE_CONFORMANCE"
		;;
	storage)
		FOCUS='\[sig-storage\] (In-tree Volumes \[Driver: (hostPath|hostPathSymlink)\]|HostPath |PV Protection )'
		TAG_SKIP="$TAGS_STORAGE"
		;;
	focus:*)
		FOCUS="${SUITE#focus:}"
		TAG_SKIP="$TAGS_FOCUS"
		;;
	esac
	e2e_skip_names 2 >"$ARTIFACTS/skip-names.txt"
	NAME_SKIP="$(e2e_names_regex <"$ARTIFACTS/skip-names.txt")" || e2e_die "e2e/skips.md names no spec"
	SKIP="$TAG_SKIP|$NAME_SKIP"
}

# --- building ------------------------------------------------------------------------------

build_all() {
	# e2e.test, ginkgo, kubectl, kube-proxy (hack/upstream/targets: e2e), and the upstream kubelet.
	local uses=(e2e)
	[[ "$KIND" != upstream ]] || uses+=(upstream)
	krs_upstream_ensure "${uses[@]}"
	"$KRS_E2E_REPO/hack/testbed/install.sh" >&2
	if [[ "$KIND" == upstream ]]; then
		KUBELET_BIN="$BIN/kubelet"
	elif [[ -n "${KRS_E2E_KUBELET:-}" ]]; then
		KUBELET_BIN="$(readlink -f "$KRS_E2E_KUBELET")"
		[[ -x "$KUBELET_BIN" ]] || e2e_die "KRS_E2E_KUBELET=$KRS_E2E_KUBELET is not executable"
	else
		export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
		e2e_log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
		(cd "$KRS_E2E_REPO" && nice -n 10 cargo build --release --bin kubelet) >&2
		KUBELET_BIN="$CARGO_TARGET_DIR/release/kubelet"
	fi
	identify_kubelet
}

# Which build the run uses, read before the suite starts (a rebuild during the run must not change
# the record): the binary's sha256 and the commit it says it was built from.
identify_kubelet() {
	KUBELET_SHA256="$(sha256sum "$KUBELET_BIN" | cut -d' ' -f1)"
	KUBELET_COMMIT="$(e2e_kubelet_commit "$KUBELET_BIN")"
	e2e_log "kubelet $KUBELET_BIN: sha256 $KUBELET_SHA256, built from ${KUBELET_COMMIT}"
}

# --- the host's side of the network ------------------------------------------------------------

ipt() { iptables -w 5 "$@"; }

# Rules in chains of our own, each reached by jumps that match our veths only.
host_rules_up() {
	local fwd="$KRS_E2E_CHAIN_FWD" in="$KRS_E2E_CHAIN_IN" dnat="$KRS_E2E_CHAIN_DNAT"
	local veths="${KRS_E2E_VETH_PREFIX}+" comment="kubelet-rs e2e"
	ipt -N "$fwd"
	ipt -A "$fwd" -i "$veths" -o "$veths" -m comment --comment "$comment: node to node" -j ACCEPT
	ipt -A "$fwd" -m comment --comment "$comment: nothing else in or out of the nodes" -j DROP
	ipt -I FORWARD 1 -o "$veths" -j "$fwd"
	ipt -I FORWARD 1 -i "$veths" -j "$fwd"
	ipt -N "$in"
	ipt -A "$in" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
	ipt -A "$in" -d 127.0.0.1/32 -p tcp --dport "$CL_APISERVER_PORT" -m conntrack --ctstate DNAT \
		-m comment --comment "$comment: the apiserver" -j ACCEPT
	ipt -A "$in" -m comment --comment "$comment: no other local service" -j DROP
	ipt -I INPUT 1 -i "$veths" -j "$in"
	ipt -t nat -N "$dnat"
	ipt -t nat -A "$dnat" -d "$MACHINE_IP/32" -p tcp --dport "$CL_APISERVER_PORT" \
		-m comment --comment "$comment: the apiserver listens on loopback" \
		-j DNAT --to-destination "127.0.0.1:$CL_APISERVER_PORT"
	ipt -t nat -I PREROUTING 1 -i "$veths" -j "$dnat"
}

host_rules_down() {
	local veths="${KRS_E2E_VETH_PREFIX}+" chain table
	while ipt -D FORWARD -i "$veths" -j "$KRS_E2E_CHAIN_FWD" 2>/dev/null; do :; done
	while ipt -D FORWARD -o "$veths" -j "$KRS_E2E_CHAIN_FWD" 2>/dev/null; do :; done
	while ipt -D INPUT -i "$veths" -j "$KRS_E2E_CHAIN_IN" 2>/dev/null; do :; done
	while ipt -t nat -D PREROUTING -i "$veths" -j "$KRS_E2E_CHAIN_DNAT" 2>/dev/null; do :; done
	for chain in "filter $KRS_E2E_CHAIN_FWD" "filter $KRS_E2E_CHAIN_IN" "nat $KRS_E2E_CHAIN_DNAT"; do
		table="${chain%% *}"
		chain="${chain#* }"
		if ipt -t "$table" -S "$chain" >/dev/null 2>&1; then
			ipt -t "$table" -F "$chain"
			ipt -t "$table" -X "$chain"
		fi
	done
}

# The addresses the bed uses must be free on this machine.
check_addresses_free() {
	local i cidr
	for cidr in "$KRS_E2E_LINK_NET" "$KRS_E2E_CLUSTER_CIDR"; do
		[[ -z "$(ip -4 route list root "$cidr")" ]] ||
			e2e_die "routes inside $cidr exist already ($(ip -4 route list root "$cidr" | head -n1)); the e2e bed needs that range"
	done
	for ((i = 1; i <= NODES; i++)); do
		e2e_node_vars "$i"
		! ip netns list | grep -qw "$N_NETNS" || e2e_die "netns $N_NETNS exists: run e2e/run.sh --down"
	done
	! ip netns list | grep -qw "$KRS_E2E_CLIENT_NETNS" ||
		e2e_die "netns $KRS_E2E_CLIENT_NETNS exists: run e2e/run.sh --down"
}

# link_up NETNS HOST_VETH I: a veth pair between the machine (HOST_VETH, 10.89.I.1 in bed 1)
# and NETNS (eth0, 10.89.I.2), and NETNS's routes: to the other links, the machine's address and every
# node's pod subnet but its own; no default route.
link_up() {
	local netns="$1" veth="$2" i="$3" j host_ip
	host_ip="$(e2e_link_ip "$i" 1)"
	ip netns add "$netns"
	ip link add "$veth" type veth peer name eth0 netns "$netns"
	ip addr add "$host_ip/24" dev "$veth"
	ip link set "$veth" up
	# DNAT to 127.0.0.1 of what arrives on this veth (the apiserver); this interface only.
	echo 1 >"/proc/sys/net/ipv4/conf/$veth/route_localnet"
	ip -n "$netns" link set lo up
	ip -n "$netns" addr add "$(e2e_link_ip "$i" 2)/24" dev eth0
	ip -n "$netns" link set eth0 up
	ip -n "$netns" route add "$KRS_E2E_LINK_NET" via "$host_ip"
	ip -n "$netns" route add "$MACHINE_IP/32" via "$host_ip"
	for ((j = 1; j <= NODES; j++)); do
		((j == i)) || ip -n "$netns" route add "$(e2e_pod_subnet "$j")" via "$host_ip"
	done
}

node_net_up() {
	e2e_node_vars "$1"
	link_up "$N_NETNS" "$N_VETH_HOST" "$1"
	ip route add "$N_POD_SUBNET" via "$N_IP" dev "$N_VETH_HOST"
}

# The test client's namespace, and what it finds in /etc (no resolver, the nodes' names) and
# /tmp (its own, with the run's artifacts).
client_up() {
	link_up "$KRS_E2E_CLIENT_NETNS" "$KRS_E2E_CLIENT_VETH" 0
	local dir="$ARTIFACTS/client" j
	mkdir -p "$dir/tmp"
	chmod 1777 "$dir/tmp"
	printf '# kubelet-rs e2e client: no DNS server here\nnameserver 127.0.0.1\n' >"$dir/resolv.conf"
	{
		cat /etc/hosts
		printf '\n# kubelet-rs e2e nodes\n'
		e2e_hosts_lines "$NODES"
	} >"$dir/hosts"
}

# --- the bed ---------------------------------------------------------------------------------

# The control plane's ports come from a range of their own, never the defaults: another cluster
# whose apiserver is down for a moment (the project's tests restart theirs) must find its usual
# port free when it comes back. Exported as KRS_CLUSTER_*_PORT, which up.sh takes as given.
choose_cluster_ports() {
	local var start port used=" "
	for var in APISERVER:16443 ETCD:22379 ETCD_PEER:22380 CM:20257 SCHEDULER:20259; do
		start="${var#*:}"
		var="KRS_CLUSTER_${var%%:*}_PORT"
		port="$start"
		while cl_port_taken "$port" || [[ "$used" == *" $port "* ]]; do
			port=$((port + 2))
			((port < start + 100)) || e2e_die "no free port for $var from $start on"
		done
		used+="$port "
		export "$var=$port"
	done
}

save_state() { printf '%s\n' "$2" >"$RUN_STATE/$1"; }
state() { cat "$RUN_STATE/$1" 2>/dev/null || true; }

node_credentials() {
	local dir="$CL_STATE/e2e-nodes" token
	mkdir -p "$dir"
	token="$(<"$CL_TOKEN_FILE")"
	# The nodes reach the apiserver at the machine's address (DNAT'ed to loopback on the host);
	# its serving certificate names that address.
	CL_APISERVER_URL="https://$MACHINE_IP:$CL_APISERVER_PORT"
	cl_write_token_kubeconfig "$dir/bootstrap-kubelet.conf" kubelet-bootstrap "$token"
	cl_sign "$CL_PKI/ca" "$dir/kube-proxy" "/CN=system:kube-proxy" clientAuth
	cl_write_kubeconfig "$dir/kube-proxy.conf" system:kube-proxy "$dir/kube-proxy.crt" "$dir/kube-proxy.key"
	# The test client's: the admin's, through the machine's address too.
	cl_write_kubeconfig "$dir/admin.conf" kubernetes-admin "$CL_PKI/admin.crt" "$CL_PKI/admin.key"
	CLIENT_CONF="$dir/admin.conf"
	CL_APISERVER_URL="https://127.0.0.1:$CL_APISERVER_PORT"
	export E2E_BOOTSTRAP_CONF="$dir/bootstrap-kubelet.conf" E2E_PROXY_CONF="$dir/kube-proxy.conf"
}

kubectl_() { "$BIN/kubectl" --kubeconfig "$CL_ADMIN_CONF" --request-timeout=20s "$@"; }

node_ready() {
	[[ "$(kubectl_ get node "$1" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]] &&
		[[ -z "$(kubectl_ get node "$1" -o 'jsonpath={.spec.taints}' 2>/dev/null)" ]]
}

start_node() {
	local i="$1" pid deadline
	e2e_node_vars "$i"
	rm -rf --one-file-system "$N_DIR"
	mkdir -p "$N_DIR"
	e2e_log "starting node $N_NAME ($KIND kubelet, log $ARTIFACTS/$N_NAME.log)"
	nsenter --net="/run/netns/$N_NETNS" unshare --mount --uts --propagation private \
		bash "$HERE/node.sh" "$i" </dev/null >"$ARTIFACTS/$N_NAME.log" 2>&1 8>&- &
	pid=$!
	save_state "node-$i.pid" "$pid"
	deadline=$((SECONDS + NODE_TIMEOUT_S))
	until [[ -e "$N_DIR/runtime-ready" ]]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$ARTIFACTS/$N_NAME.log" >&2
			e2e_die "node $N_NAME failed to start; log $ARTIFACTS/$N_NAME.log"
		fi
		((SECONDS < deadline)) || e2e_die "containerd of node $N_NAME not up within ${NODE_TIMEOUT_S}s"
		sleep 1
	done
	# From the machine's namespaces: building an image may need packages or cargo, and the node
	# has no way out. The node's containerd is reached through its socket.
	e2e_log "importing the test images into containerd $N_INSTANCE (e2e/images.sh)"
	mkdir -p "$ARTIFACTS/$N_NAME"
	if ! "$HERE/images.sh" "$N_INSTANCE" >"$ARTIFACTS/$N_NAME/images.log" 2>&1 8>&-; then
		tail -n 20 "$ARTIFACTS/$N_NAME/images.log" >&2
		e2e_die "e2e/images.sh $N_INSTANCE failed; log $ARTIFACTS/$N_NAME/images.log"
	fi
	touch "$N_DIR/images-ready"
	until [[ -e "$N_READY" ]]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$ARTIFACTS/$N_NAME.log" >&2
			e2e_die "node $N_NAME failed to start; log $ARTIFACTS/$N_NAME.log"
		fi
		((SECONDS < deadline)) || e2e_die "node $N_NAME not started within ${NODE_TIMEOUT_S}s"
		sleep 1
	done
	until node_ready "$N_NAME"; do
		[[ ! -e "$N_DIED" ]] || e2e_die "node $N_NAME: $(<"$N_DIED"); logs in $ARTIFACTS/$N_NAME/"
		((SECONDS < deadline)) || e2e_die "node $N_NAME not Ready within ${NODE_TIMEOUT_S}s; logs in $ARTIFACTS/$N_NAME/"
		sleep 2
	done
	e2e_log "node $N_NAME Ready: $(kubectl_ get node "$N_NAME" --no-headers -o wide | awk '{ print $5, $6 }')"
}

bed_up() {
	mkdir -p "$RUN_STATE"
	MACHINE_IP="$(cl_node_ip)"
	check_addresses_free
	ip route show type blackhole | grep -q "^blackhole $KRS_CL_SERVICE_CIDR" || save_state blackhole-added 1
	if [[ "$(</proc/sys/net/ipv4/ip_forward)" != 1 ]]; then
		save_state ip-forward-was 0
		echo 1 >/proc/sys/net/ipv4/ip_forward
	fi
	BED_UP=1
	choose_cluster_ports
	e2e_log "starting the control plane $KRS_E2E_CLUSTER (hack/cluster/up.sh; apiserver port $KRS_CLUSTER_APISERVER_PORT)"
	KRS_CLUSTER_APISERVER_EXTRA_FLAGS="--enable-aggregator-routing=true" \
		"$KRS_E2E_REPO/hack/cluster/up.sh" "$KRS_E2E_CLUSTER" >/dev/null 8>&-
	save_state cluster-started 1
	cl_vars "$KRS_E2E_CLUSTER"
	cl_load_ports
	node_credentials
	export E2E_KIND="$KIND" E2E_KUBELET_BIN="$KUBELET_BIN" E2E_NODES="$NODES" \
		E2E_CA="$CL_PKI/ca.crt" E2E_MACHINE_IP="$MACHINE_IP" \
		E2E_APISERVER_PORT="$CL_APISERVER_PORT" E2E_ARTIFACTS="$ARTIFACTS"
	host_rules_up
	local i
	for ((i = 1; i <= NODES; i++)); do node_net_up "$i"; done
	client_up
	for ((i = 1; i <= NODES; i++)); do start_node "$i"; done
}

# Takes down whatever a run (this one or a killed one) left: safe to call at any point.
bed_down() {
	set +e
	local i pid deadline
	if [[ -n "$GINKGO_PID" ]] && kill -0 "$GINKGO_PID" 2>/dev/null; then
		e2e_log "stopping ginkgo"
		kill -TERM -- "-$GINKGO_PID" 2>/dev/null
		sleep 3
		kill -KILL -- "-$GINKGO_PID" 2>/dev/null
	fi
	for i in 1 2; do
		e2e_node_vars "$i"
		pid="$(state "node-$i.pid")"
		if e2e_pid_is "$pid" e2e/node.sh; then
			e2e_log "stopping node $N_NAME"
			kill -TERM "$pid" 2>/dev/null
			deadline=$((SECONDS + 300))
			while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
			kill -0 "$pid" 2>/dev/null && e2e_log "node.sh $N_NAME (pid $pid) did not finish"
		fi
		node_leftovers_down
		ip link del "$N_VETH_HOST" 2>/dev/null
		ip netns del "$N_NETNS" 2>/dev/null
		rm -f "$RUN_STATE/node-$i.pid"
	done
	ip link del "$KRS_E2E_CLIENT_VETH" 2>/dev/null
	ip netns del "$KRS_E2E_CLIENT_NETNS" 2>/dev/null
	host_rules_down
	save_cluster_logs
	if [[ "$(state cluster-started)" == 1 || -d "/var/lib/kubelet-rs/cluster/$KRS_E2E_CLUSTER" ]]; then
		"$KRS_E2E_REPO/hack/cluster/down.sh" --purge "$KRS_E2E_CLUSTER" 2>&1 | sed 's/^/  /' >&2
	fi
	# The blackhole route and ip_forward are the machine's, shared with a bed still running: that
	# bed then puts them back when it ends.
	local other
	other="$(other_bed_state)"
	if [[ -n "$other" ]]; then
		local f
		for f in blackhole-added ip-forward-was; do
			[[ -n "$(state "$f")" && ! -e "$other/$f" ]] && cp "$RUN_STATE/$f" "$other/$f"
		done
	else
		if [[ "$(state blackhole-added)" == 1 ]]; then
			ip route del blackhole "$KRS_CL_SERVICE_CIDR" 2>/dev/null
		fi
		if [[ "$(state ip-forward-was)" == 0 ]]; then
			echo 0 >/proc/sys/net/ipv4/ip_forward
		fi
	fi
	rm -rf "$RUN_STATE"
	verify_clean
	set -e
}

# The state folder of the other bed, if a run holds it now (its lock is taken).
other_bed_state() {
	local dir lock
	for dir in /run/kubelet-rs/e2e*-run; do
		[[ -d "$dir" && "$dir" != "$RUN_STATE" ]] || continue
		lock="$dir.lock"
		[[ -e "$lock" ]] || continue
		if ! flock -n "$lock" true 2>/dev/null; then
			printf '%s\n' "$dir"
			return
		fi
	done
}

# The control plane's logs go with its purge: keep a copy with the run's.
save_cluster_logs() {
	local run="/run/kubelet-rs/cluster/$KRS_E2E_CLUSTER" f
	[[ -d "$run" && -n "$ARTIFACTS" && -d "$ARTIFACTS" ]] || return 0
	mkdir -p "$ARTIFACTS/control-plane"
	for f in "$run"/*.log "$run"/*.log.1; do
		[[ -e "$f" ]] && cp -f "$f" "$ARTIFACTS/control-plane/"
	done
}

# What node.sh takes down itself, in case it could not (killed): its processes, its containerd,
# its cgroups and folder. Runs in the machine's mount namespace: the node's own mounts went away
# with its namespace.
node_leftovers_down() {
	local f
	for f in kube-proxy kubelet; do
		[[ -r "$N_DIR/$f.pid" ]] && e2e_stop_pid "$(<"$N_DIR/$f.pid")" "--hostname-override=$N_NAME" 10
	done
	if [[ -d "/run/kubelet-rs/$N_INSTANCE" || -d "/var/lib/kubelet-rs/$N_INSTANCE/containerd" ]]; then
		KRS_NET_INDEX="$N_NET_INDEX" "$KRS_E2E_REPO/hack/testbed/containerd.sh" purge "$N_INSTANCE" 2>&1 8>&- |
			sed 's/^/  /' >&2
	fi
	e2e_unmount_under "$N_DIR"
	e2e_remove_cgroup "$N_CGROUP" 2>/dev/null
	[[ ! -d "$N_DIR" ]] || rm -rf --one-file-system "$N_DIR"
}

# Says what is left of the bed, if anything.
verify_clean() {
	local left=() i m
	for i in 1 2; do
		e2e_node_vars "$i"
		ip netns list | grep -qw "$N_NETNS" && left+=("netns $N_NETNS")
		ip link show "$N_VETH_HOST" >/dev/null 2>&1 && left+=("link $N_VETH_HOST")
		[[ -e "$N_DIR" ]] && left+=("$N_DIR")
		[[ -e "/run/kubelet-rs/$N_INSTANCE" ]] && left+=("/run/kubelet-rs/$N_INSTANCE")
		while read -r m; do
			[[ -d "$m/$N_CGROUP" ]] && left+=("cgroup $m/$N_CGROUP")
		done < <(e2e_cgroup_dirs)
		pgrep -f "$N_DIR|/run/kubelet-rs/$N_INSTANCE/" >/dev/null && left+=("processes of $N_NAME")
	done
	ip netns list | grep -qw "$KRS_E2E_CLIENT_NETNS" && left+=("netns $KRS_E2E_CLIENT_NETNS")
	ip link show "$KRS_E2E_CLIENT_VETH" >/dev/null 2>&1 && left+=("link $KRS_E2E_CLIENT_VETH")
	iptables -w 5 -S | grep -qF -- "$KRS_E2E_CHAIN_PREFIX" && left+=("iptables filter rules")
	iptables -w 5 -t nat -S | grep -qF -- "$KRS_E2E_CHAIN_PREFIX" && left+=("iptables nat rules")
	[[ -n "$(ip -4 route list root "$KRS_E2E_CLUSTER_CIDR")" ]] && left+=("routes to the pod subnets")
	[[ -e "/var/lib/kubelet-rs/cluster/$KRS_E2E_CLUSTER" ]] && left+=("cluster $KRS_E2E_CLUSTER state")
	pgrep -f "/var/lib/kubelet-rs/cluster/$KRS_E2E_CLUSTER/" >/dev/null && left+=("cluster $KRS_E2E_CLUSTER processes")
	if ((${#left[@]})); then
		e2e_log "warning: left behind: ${left[*]}"
		return 1
	fi
	e2e_log "cleanup verified: no e2e namespace, link, route, iptables rule, folder, cgroup, process or cluster left"
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if ((BED_UP)); then
		e2e_log "taking the bed down"
		bed_down
	fi
	exit "$rc"
}

# --- the suite -------------------------------------------------------------------------------

upstream_tree() { find "$KRS_UPSTREAM_CACHE/src" -mindepth 1 -maxdepth 1 -type d | head -n1; }

# run_ginkgo LABEL NODES FOCUS SKIP: one ginkgo pass; junit in $ARTIFACTS/junit-LABEL/.
run_ginkgo() {
	local label="$1" gnodes="$2" focus="$3" skip="$4" log="$ARTIFACTS/ginkgo-$1.log" rc=0 last=""
	mkdir -p "$ARTIFACTS/junit-$label"
	local args=(
		-nodes="$gnodes" -noColor -slowSpecThreshold=300
		-focus="$focus" -skip="$skip"
		"$BIN/e2e.test" --
		--kubeconfig="$CLIENT_CONF"
		--provider=skeleton
		--kubectl-path="$BIN/kubectl"
		--report-dir="$ARTIFACTS/junit-$label"
		--e2e-output-dir="$ARTIFACTS"
		--repo-root="$(upstream_tree)"
		--container-runtime=remote
		--container-runtime-endpoint="unix:///run/kubelet-rs/$(e2e_node_name 1)/containerd.sock"
		--dns-domain=cluster.local
		--disable-log-dump
		--minStartupPods=0
		--node-schedulable-timeout=5m
		--system-pods-startup-timeout=2m
	)
	printf '%s\n' "$BIN/ginkgo" "${args[@]}" >"$ARTIFACTS/ginkgo-$label.args"
	e2e_log "ginkgo ($label, $gnodes node(s)), log $log"
	# In the client's namespaces (e2e/lib.sh), in a session of its own: Ctrl-C reaches this
	# script, whose exit trap stops ginkgo and its e2e.test.
	# shellcheck disable=SC2016 # expanded by the inner shell
	nsenter --net="/run/netns/$KRS_E2E_CLIENT_NETNS" unshare --mount --propagation private \
		bash -c 'mount --bind "$1/resolv.conf" /etc/resolv.conf && mount --bind "$1/hosts" /etc/hosts &&
			mount --bind "$1/tmp" /tmp && cd "$2" && shift 2 && exec setsid "$@"' client \
		"$ARTIFACTS/client" "$ARTIFACTS" \
		"$BIN/ginkgo" "${args[@]}" </dev/null >"$log" 2>&1 8>&- &
	GINKGO_PID=$!
	local next=$((SECONDS + 60))
	while kill -0 "$GINKGO_PID" 2>/dev/null; do
		# In the background, so that a signal is handled at once.
		sleep 2 &
		wait $! || true
		((SECONDS >= next)) || continue
		next=$((SECONDS + 60))
		last="$(grep -o '"completed":[0-9]*,"skipped":[0-9]*,"failed":[0-9]*' "$log" | tail -n1)"
		[[ -z "$last" ]] || e2e_log "ginkgo $label: ${last//\"/}"
	done
	wait "$GINKGO_PID" || rc=$?
	GINKGO_PID=""
	tail -n 5 "$log" >&2
	return "$rc"
}

run_suite() {
	local start=$SECONDS rc=0
	if ((PARALLEL > 1)) && [[ "$TAG_SKIP" != *'\[Serial\]'* ]]; then
		# As upstream's parallel runs: everything else in parallel, then the [Serial] specs alone.
		run_ginkgo parallel "$PARALLEL" "$FOCUS" "$SKIP|\[Serial\]" || rc=1
		run_ginkgo serial 1 "\[Serial\].*($FOCUS)|($FOCUS).*\[Serial\]" "$SKIP" || rc=1
	else
		run_ginkgo main "$PARALLEL" "$FOCUS" "$SKIP" || rc=1
	fi
	DURATION_S=$((SECONDS - start))
	return "$rc"
}

run_info() {
	local kubelet_version
	kubelet_version="$("$KUBELET_BIN" --version 2>/dev/null | head -n1)" || true
	cat <<EOF
suite: $SUITE
kubelet: $KIND ($kubelet_version, $KUBELET_BIN)
kubelet sha256: $KUBELET_SHA256
kubelet commit: $KUBELET_COMMIT
harness commit: $HARNESS_COMMIT
nodes: $NODES
parallel: $PARALLEL
machine: $(uname -r), $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup, PID 1 $(ps -o comm= -p 1), containerd $(containerd --version 2>/dev/null | awk '{ print $3 }')
date: $(date -u '+%Y-%m-%d %H:%M UTC')
duration: $((DURATION_S / 60)) min $((DURATION_S % 60)) s (ginkgo)
focus: $FOCUS
skip: $TAG_SKIP and the $(wc -l <"$ARTIFACTS/skip-names.txt") specs of e2e/skips.md
EOF
	local i
	for ((i = 1; i <= NODES; i++)); do
		e2e_node_vars "$i"
		if [[ -e "$N_DIED" ]]; then
			printf 'WARNING: node %s: %s' "$N_NAME" "$(<"$N_DIED")"
		fi
	done
}

summarize() {
	local out="$ARTIFACTS/result" junits=()
	mapfile -t junits < <(find "$ARTIFACTS" -path "$ARTIFACTS/junit-*" -name 'junit*.xml' | sort)
	((${#junits[@]})) || e2e_die "ginkgo wrote no junit file; see $ARTIFACTS/ginkgo-*.log"
	run_info >"$ARTIFACTS/run.txt"
	python3 "$HERE/junit.py" summarize --suite "${RESULTS_AS:-${SUITE%%:*}}" --kubelet "$KIND" \
		--focus "$FOCUS" --tag-skip "$TAG_SKIP" --skip-names "$ARTIFACTS/skip-names.txt" \
		--run-info "$ARTIFACTS/run.txt" --out "$out" "${junits[@]}"
	cat "$out/summary.md"
	if ((RESULTS)) && [[ "$SUITE" =~ ^(node-conformance|conformance|storage)$ ]]; then
		local name="${RESULTS_AS:-$SUITE}"
		local dest="$HERE/results/$name/$KIND" j
		rm -rf "$dest"
		mkdir -p "$dest/ginkgo"
		cp "$out/junit.xml" "$out/summary.md" "$out/summary.json" "$dest/"
		cp "$ARTIFACTS/run.txt" "$dest/run.txt"
		# ginkgo's own junit files, as it wrote them (every spec of the suite, the captured
		# output of failures), compressed: the summary's evidence.
		for j in "${junits[@]}"; do
			gzip -9n <"$j" >"$dest/ginkgo/$(basename "$(dirname "$j")")-$(basename "$j").gz"
		done
		"$HERE/compare.sh" "$name"
		e2e_log "results in $dest; comparison in $HERE/results/$name/specs.md"
	fi
	local expect=()
	# Every spec quick.txt names must have run: a renamed spec or a name that matches nothing
	# would otherwise pass in silence.
	[[ "$SUITE" != quick ]] || expect=(--expect "$ARTIFACTS/expected-names.txt")
	python3 "$HERE/junit.py" failed "${expect[@]}" "$out/summary.json"
}

hold() {
	e2e_log "the bed stays up until Ctrl-C or SIGTERM (pid $$):"
	e2e_log "  kubectl --kubeconfig $CL_ADMIN_CONF get nodes"
	e2e_log "  ip netns exec $(e2e_node_name 1) ...; node logs in $ARTIFACTS/$KRS_E2E_NAME-n*/"
	while :; do
		sleep 5 &
		wait $! || true
	done
}

main() {
	parse_args "$@"
	[[ "$(id -u)" -eq 0 ]] || e2e_die "must run as root"
	mkdir -p /run/kubelet-rs
	exec 8>"$KRS_E2E_LOCK"
	flock -n 8 || e2e_die "another e2e/run.sh runs on bed $KRS_E2E_BED (lock $KRS_E2E_LOCK); --bed picks the other"
	trap on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if ((DOWN_ONLY)); then
		bed_down
		return
	fi
	if [[ -d "$RUN_STATE" ]] || ip netns list | grep -qwE "$KRS_E2E_NAME-n[12]|$KRS_E2E_CLIENT_NETNS"; then
		e2e_log "a previous run left its bed up: taking it down first"
		bed_down
	fi
	rm -rf "$ARTIFACTS"
	mkdir -p "$ARTIFACTS"
	HARNESS_COMMIT="$(git -C "$KRS_E2E_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	git -C "$KRS_E2E_REPO" diff --quiet HEAD -- e2e 2>/dev/null || HARNESS_COMMIT+=" (e2e/ dirty)"
	suite_regexes
	build_all
	bed_up
	local rc=0
	run_suite || rc=1
	summarize || rc=1
	((HOLD)) && hold
	return "$rc"
}

main "$@"
