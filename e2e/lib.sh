# shellcheck shell=bash disable=SC2034
# Shared names, addresses and helpers of e2e/run.sh and e2e/node.sh (e2e/kubeadm and
# e2e/node-e2e use its helpers too). Sourced, never run.
#
# The conformance bed, for NODES nodes (1 or 2), around the control plane "e2e" of hack/cluster
# (on 127.0.0.1, in the machine's own namespaces):
#
#   node i (i = 1, 2): network namespace e2e-n<i> (ip netns), entered with a private mount and
#   UTS namespace; in it run the node's containerd (test-bed instance e2e-n<i>), its kubelet
#   (ours or upstream's) and its kube-proxy (iptables mode).
#     eth0         10.89.<i>.2/24, the node's InternalIP; peer of krs-e2e-<i> (10.89.<i>.1) on the host
#     krs<230+i>   the CNI bridge, pod subnet 10.88.<230+i>.0/24 (the instance's KRS_NET_INDEX)
#     routes       only to the host end, the other nodes' links and pod subnets and the machine's
#                  own address (the apiserver): no default route, so nothing leaves the machine
#   host: a route per pod subnet via the node's veth; the apiserver port on the machine's address
#   is DNAT'ed to 127.0.0.1 for traffic from the nodes' veths (route_localnet on those veths
#   only); forwarding between node veths is allowed, any other forwarding from or to them dropped;
#   nodes reach no other local service on the host.
#   the test client: ginkgo and e2e.test (and the kubectl they run) live in network namespace
#     e2e-client (10.89.0.2 on eth0, peer krs-e2e-0 = 10.89.0.1), routed like a node, with a
#     private /etc/resolv.conf (no resolver) and /etc/hosts (the nodes' names): some specs run
#     Go code in the test process that looks up or dials the internet, and that must fail
#     here, locally. It reaches the apiserver as the nodes do.
#
# Two beds can run at once (KRS_E2E_BED=1, the default, or 2: e2e/run.sh --bed): bed 2 has the
# same shape with other names and addresses (cluster, namespaces and nodes e2e2-*, links
# 10.90.<i>.*, pod subnets 10.88.<240+i>.0/24, chains KRS-E2E2-*), so ours and upstream's
# kubelet can be measured side by side.
#
# Both nodes are namespaces of their own, the first one too: kube-proxy's rules then live in the
# node's namespace (the machine's other clusters use the same service CIDR and must not see
# them), and each node has the default kubelet ports to itself.

KRS_E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KRS_E2E_REPO="$(cd "$KRS_E2E_ROOT/.." && pwd)"
KRS_E2E_BED="${KRS_E2E_BED:-1}"
[[ "$KRS_E2E_BED" == 1 || "$KRS_E2E_BED" == 2 ]] || {
	echo "e2e: KRS_E2E_BED (--bed) must be 1 or 2" >&2
	exit 2
}
export KRS_E2E_BED
# e2e for bed 1, e2e2 for bed 2: the cluster's name and the prefix of everything else.
if [[ "$KRS_E2E_BED" == 1 ]]; then KRS_E2E_NAME="e2e"; else KRS_E2E_NAME="e2e$KRS_E2E_BED"; fi
KRS_E2E_CLUSTER="$KRS_E2E_NAME"
# The links' first two octets (10.89, 10.90) and the base of the pod subnets' third (230, 240).
KRS_E2E_LINK_BASE="10.$((88 + KRS_E2E_BED))"
KRS_E2E_NET_BASE="$((230 + 10 * (KRS_E2E_BED - 1)))"
KRS_E2E_RUN_STATE="/run/kubelet-rs/$KRS_E2E_NAME-run"
KRS_E2E_LOCK="/run/kubelet-rs/$KRS_E2E_NAME-run.lock"
# shellcheck source=hack/upstream/lib.sh
source "$KRS_E2E_REPO/hack/upstream/lib.sh"
KRS_E2E_UPSTREAM_BIN="$KRS_UPSTREAM_BIN_DIR"
# Host-side interface prefix of the nodes' veths; iptables matches them with "krs-e2e-+".
KRS_E2E_VETH_PREFIX="krs-$KRS_E2E_NAME-"
KRS_E2E_LINK_NET="$KRS_E2E_LINK_BASE.0.0/16"
# Covers every node's pod subnet of this bed (10.88.231.0/24 and 10.88.232.0/24 in bed 1) and
# none of the other bed's: kube-proxy's --cluster-cidr.
KRS_E2E_CLUSTER_CIDR="10.88.$((224 + 16 * (KRS_E2E_BED - 1))).0/20"
KRS_E2E_CLUSTER_DNS="10.96.0.10"
# The iptables chains of the host side (filter: FORWARD and INPUT; nat: PREROUTING).
KRS_E2E_CHAIN_PREFIX="KRS-${KRS_E2E_NAME^^}-"
KRS_E2E_CHAIN_FWD="${KRS_E2E_CHAIN_PREFIX}FORWARD"
KRS_E2E_CHAIN_IN="${KRS_E2E_CHAIN_PREFIX}INPUT"
KRS_E2E_CHAIN_DNAT="${KRS_E2E_CHAIN_PREFIX}DNAT"
# The sysctls a kubelet or kube-proxy writes that are not per network namespace: each node gets
# private copies (plain files bound over them in its mount namespace).
KRS_E2E_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# e2e_private_sysctls DIR: gives this mount namespace private copies of KRS_E2E_SYSCTLS (plain
# files under DIR, bound over them).
e2e_private_sysctls() {
	local dir="$1" key f
	mkdir -p "$dir"
	for key in "${KRS_E2E_SYSCTLS[@]}"; do
		[[ -e "/proc/sys/$key" ]] || continue
		f="$dir/${key//\//.}"
		cat "/proc/sys/$key" >"$f"
		mount --bind "$f" "/proc/sys/$key"
	done
}

# A regular expression (RE2) matching exactly the given spec names, one per line on stdin; fails
# when there are none. ginkgo (v1) matches -focus and -skip against "<suite description> [Top
# Level] <spec name>", not the name alone: a name anchored with ^ matches nothing.
e2e_names_regex() {
	local names
	names="$(sed -e 's/[][\.*^$+?(){}|]/\\&/g' | paste -sd '|')"
	[[ -n "$names" ]] || return 1
	printf '\\[Top Level\\] (%s)$\n' "$names"
}

# e2e_skip_names N: the specs section N of e2e/skips.md names (the first `...` of every table
# row under "## N."): 2 for e2e/run.sh's suites, 3 for the node e2e suite.
e2e_skip_names() {
	# shellcheck disable=SC2016 # backquotes of the markdown, not a command
	awk -v n="$1" '/^## / { named = index($0, "## " n ".") == 1 } named' "$KRS_E2E_ROOT/skips.md" |
		sed -n 's/^| `\([^`]*\)` |.*/\1/p'
}

# e2e_kubelet_commit BIN: the commit a kubelet binary says it was built from (`--version=raw`:
# build.rs stamps ours, upstream's carries the tree's) with its tree state (ours: "dirty" when
# its sources differed from that commit), e.g. "b6e2fae... (clean)"; "unknown" without one.
e2e_kubelet_commit() {
	local raw commit state
	raw="$("$1" --version=raw 2>/dev/null | head -n1)" || true
	commit="$(sed -n 's/.*GitCommit:"\([0-9a-f]*\)".*/\1/p' <<<"$raw")"
	state="$(sed -n 's/.*GitTreeState:"\([a-z]*\)".*/\1/p' <<<"$raw")"
	printf '%s\n' "${commit:-unknown}${state:+ ($state)}"
}

e2e_log() { printf '[e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
e2e_die() {
	printf '[e2e %(%H:%M:%S)T] error: %s\n' -1 "$*" >&2
	exit 1
}

KRS_E2E_CLIENT_NETNS="$KRS_E2E_NAME-client"
KRS_E2E_CLIENT_VETH="${KRS_E2E_VETH_PREFIX}0"

# Names and addresses of link or node I of this bed (0 is the test client's link).
e2e_node_name() { printf '%s-n%d\n' "$KRS_E2E_NAME" "$1"; }
# e2e_link_ip I END: END 1 is the machine's side of link I, 2 the namespace's.
e2e_link_ip() { printf '%s.%d.%d\n' "$KRS_E2E_LINK_BASE" "$1" "$2"; }
e2e_pod_subnet() { printf '10.88.%d.0/24\n' "$((KRS_E2E_NET_BASE + $1))"; }
# e2e_hosts_lines NODES: the /etc/hosts lines of the bed's nodes.
e2e_hosts_lines() {
	local j
	for ((j = 1; j <= $1; j++)); do printf '%s %s\n' "$(e2e_link_ip "$j" 2)" "$(e2e_node_name "$j")"; done
}

# e2e_node_vars I: sets the N_* variables of node I.
e2e_node_vars() {
	local i="$1"
	N_INDEX="$i"
	N_NAME="$(e2e_node_name "$i")"
	N_NETNS="$N_NAME"
	N_INSTANCE="$N_NAME"
	N_VETH_HOST="$KRS_E2E_VETH_PREFIX$i"
	N_HOST_IP="$(e2e_link_ip "$i" 1)"
	N_IP="$(e2e_link_ip "$i" 2)"
	N_NET_INDEX="$((KRS_E2E_NET_BASE + i))"
	N_POD_SUBNET="$(e2e_pod_subnet "$i")"
	N_DIR="/var/lib/kubelet-rs/$N_NAME"
	N_ROOT_DIR="$N_DIR/kubelet"
	N_CGROUP="kubelet-rs-$N_NAME"
	N_READY="$N_DIR/ready"
	N_DIED="$N_DIR/died"
}

# e2e_pid_is PID WORD: true if PID runs and its command line contains WORD (a recycled pid is
# never taken for ours).
e2e_pid_is() {
	local pid="$1" word="$2" cmdline
	[[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
	cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
	[[ "$cmdline" == *"$word"* ]]
}

# e2e_stop_pid PID WORD GRACE: SIGTERM, then SIGKILL after GRACE seconds; only if e2e_pid_is.
e2e_stop_pid() {
	local pid="$1" word="$2" grace="$3" deadline
	e2e_pid_is "$pid" "$word" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + grace))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	if kill -0 "$pid" 2>/dev/null; then
		e2e_log "pid $pid ($word) still running after ${grace}s: killing it"
		kill -KILL "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 5))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
	fi
}

# Cgroup hierarchies mounted in this mount namespace (v1 controllers and the v2 one).
e2e_cgroup_dirs() {
	awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo
}

# e2e_remove_cgroup NAME: removes the cgroup NAME and everything under it from every hierarchy.
# Fails (and says which) if one is still busy.
e2e_remove_cgroup() {
	local m rc=0
	while read -r m; do
		[[ -d "$m/$1" ]] || continue
		if ! find "$m/$1" -depth -type d -exec rmdir {} + 2>/dev/null; then
			e2e_log "cgroup $m/$1 still busy; left in place"
			rc=1
		fi
	done < <(e2e_cgroup_dirs)
	return "$rc"
}

# e2e_unmount_under DIR: unmounts every mount point at or below DIR in this mount namespace,
# deepest first.
e2e_unmount_under() {
	local dir="$1" m
	awk '{ print $5 }' /proc/self/mountinfo | while read -r m; do
		m="$(printf '%b' "$m")"
		[[ "$m" == "$dir" || "$m" == "$dir/"* ]] && printf '%s\n' "$m"
	done | sort -r -u | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || e2e_log "cannot unmount $m"
	done
}
