#!/usr/bin/env bash
# Usage: e2e/node.sh I       (started by e2e/run.sh only)
#
# Runs node I of the conformance bed (e2e/lib.sh) until it gets SIGTERM, then takes it down.
# run.sh starts it inside the node's network namespace (ip netns e2e-n<I>) and a new mount and
# UTS namespace:
#   nsenter --net=/run/netns/e2e-n<I> unshare --mount --uts --propagation private e2e/node.sh I
# In there it
#   - sets the hostname to the node name and makes private copies of what a kubelet or kube-proxy
#     writes outside its own folders: /var/log/pods, /var/log/containers, /tmp (hostPath specs
#     write there), /etc/hosts (with every node's name and address), /etc/resolv.conf (no
#     resolver: lookups fail at once) and the sysctls that are not per network namespace
#     (KRS_E2E_SYSCTLS);
#   - starts the test-bed containerd e2e-n<I> (hack/testbed/containerd.sh; pod subnet
#     10.88.<230+I>.0/24, its FORWARD guard), touches <node dir>/runtime-ready and waits for
#     <node dir>/images-ready: run.sh imports the suite's images from the machine's namespaces
#     (e2e/images.sh may build images and install packages; the node has no way out);
#   - lets pod traffic reach the other nodes (their links and pod subnets) and the apiserver's
#     port on the machine's address, ahead of the guard that drops everything else;
#   - starts the kubelet (E2E_KIND ours or upstream; the same flags, plus
#     --container-runtime=remote for upstream's) and kube-proxy in iptables mode, with a PATH
#     whose modprobe refuses (kube-proxy 1.20 tries to load the IPVS modules even in iptables
#     mode; a module is host-wide);
#   - touches <node dir>/ready, then watches both; if one exits it writes <node dir>/died.
# On SIGTERM (or any exit): stops kube-proxy and runs `kube-proxy --cleanup`, stops the kubelet,
# purges the containerd instance (kills every container, unmounts, deletes its state and root),
# unmounts what the kubelet mounted, removes the node's cgroups and deletes the node's folder.
# Logs go to $E2E_ARTIFACTS/<node>/.
#
# Environment (set by run.sh): E2E_KIND, E2E_KUBELET_BIN, E2E_NODES, E2E_BOOTSTRAP_CONF,
# E2E_PROXY_CONF, E2E_CA, E2E_MACHINE_IP, E2E_APISERVER_PORT, E2E_ARTIFACTS.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/lib.sh
source "$HERE/lib.sh"
TESTBED="$KRS_E2E_REPO/hack/testbed"

KUBELET_PID=""
PROXY_PID=""
CONTAINERD_STARTED=0
LOGS=""

nlog() { printf '[e2e %(%H:%M:%S)T %s] %s\n' -1 "$N_NAME" "$*" >&2; }

privatize() {
	local priv="$N_DIR/private"
	mkdir -p "$priv/pod-logs" "$priv/container-logs" "$priv/tmp" \
		/var/log/pods /var/log/containers
	chmod 1777 "$priv/tmp"
	e2e_private_sysctls "$priv/sysctl"
	{
		cat /etc/hosts
		printf '\n# kubelet-rs e2e nodes\n'
		e2e_hosts_lines "$E2E_NODES"
	} >"$priv/hosts"
	mount --bind "$priv/hosts" /etc/hosts
	printf '# kubelet-rs e2e node: no DNS server here\nnameserver 127.0.0.1\n' >"$priv/resolv.conf"
	mount --bind "$priv/resolv.conf" /etc/resolv.conf
	mount --bind "$priv/pod-logs" /var/log/pods
	mount --bind "$priv/container-logs" /var/log/containers
	# Device plugins meet the kubelet in this fixed folder, whatever its --root-dir: each node
	# has its own, as each machine would.
	mkdir -p "$priv/device-plugins" /var/lib/kubelet/device-plugins
	mount --bind "$priv/device-plugins" /var/lib/kubelet/device-plugins
	private_tmp "$priv"
	hostname "$N_NAME"
}

# The node gets a /tmp of its own (hostPath specs write there). What the node needs from the
# machine's /tmp (a checkout, a cargo target folder, artifacts kept there) stays visible at the
# same path: bound aside first, then back in place on top of the new /tmp.
private_tmp() {
	local priv="$1" keep=() p i=0
	for p in "$KRS_E2E_REPO" "$(dirname "$E2E_KUBELET_BIN")" "$E2E_ARTIFACTS"; do
		[[ "$p" == /tmp/* ]] && keep+=("$p")
	done
	for p in "${keep[@]}"; do
		mkdir -p "$priv/keep/$i"
		mount --bind "$p" "$priv/keep/$i"
		i=$((i + 1))
	done
	mount --bind "$priv/tmp" /tmp
	i=0
	for p in "${keep[@]}"; do
		mkdir -p "$p"
		mount --bind "$priv/keep/$i" "$p"
		# Nothing under the node's folder may lead into the checkout when the folder is removed.
		umount "$priv/keep/$i"
		i=$((i + 1))
	done
}

# Pod traffic may go to the other nodes and to the apiserver (through the host's DNAT), and
# nowhere else: these ACCEPTs sit above containerd.sh's "stays on the pod network" DROP.
allow_node_traffic() {
	local j rules=()
	rules+=("-d $KRS_E2E_LINK_NET")
	for ((j = 1; j <= E2E_NODES; j++)); do
		((j == N_INDEX)) || rules+=("-d $(e2e_pod_subnet "$j")")
	done
	rules+=("-d $E2E_MACHINE_IP/32 -p tcp --dport $E2E_APISERVER_PORT")
	local r
	for r in "${rules[@]}"; do
		# shellcheck disable=SC2086 # r holds several words on purpose
		iptables -w 5 -I FORWARD 1 -s "$N_POD_SUBNET" $r \
			-m comment --comment "kubelet-rs e2e: pods reach the other nodes and the apiserver" -j ACCEPT
	done
}

kubelet_flags() {
	FLAGS=(
		--bootstrap-kubeconfig="$E2E_BOOTSTRAP_CONF"
		--kubeconfig="$N_ROOT_DIR/kubelet.conf"
		--cert-dir="$N_ROOT_DIR/pki"
		--rotate-certificates=true
		--container-runtime-endpoint="$CONTAINER_RUNTIME_ENDPOINT"
		--root-dir="$N_ROOT_DIR"
		--cgroup-root="/$N_CGROUP"
		--cgroups-per-qos=true
		--cgroup-driver=cgroupfs
		--hostname-override="$N_NAME"
		--node-ip="$N_IP"
		--address="$N_IP"
		--port=10250
		--healthz-bind-address=127.0.0.1
		--healthz-port=10248
		--read-only-port=0
		--anonymous-auth=false
		--client-ca-file="$E2E_CA"
		--authentication-token-webhook=true
		--authorization-mode=Webhook
		--cluster-domain=cluster.local
		--cluster-dns="$KRS_E2E_CLUSTER_DNS"
		# What Default-policy and host-network pods get: a nameserver on their own loopback,
		# where nothing answers (ClusterFirst pods get --cluster-dns, which nothing serves).
		--resolv-conf="$N_DIR/private/resolv.conf"
		--pod-infra-container-image="$KRS_SANDBOX_IMAGE"
		--volume-plugin-dir="$N_ROOT_DIR/volume-plugins"
		--fail-swap-on=false
		# The test machines' disks are often over 85 % full: image GC would delete the imported
		# test images (nothing can pull them again) and the default eviction thresholds would
		# taint the node.
		--image-gc-high-threshold=100
		--image-gc-low-threshold=99
		'--eviction-hard=memory.available<100Mi,nodefs.available<1%,imagefs.available<1%'
		--v=2
	)
	[[ "$E2E_KIND" != upstream ]] || FLAGS+=(--container-runtime=remote)
}

proxy_flags() {
	FLAGS=(
		--kubeconfig="$E2E_PROXY_CONF"
		--hostname-override="$N_NAME"
		--bind-address="$N_IP"
		--proxy-mode=iptables
		--cluster-cidr="$KRS_E2E_CLUSTER_CIDR"
		# 0: leave the conntrack table size and timeouts alone (they are host-wide).
		--conntrack-max-per-core=0
		--conntrack-tcp-timeout-established=0
		--conntrack-tcp-timeout-close-wait=0
		--healthz-bind-address=127.0.0.1:10256
		--metrics-bind-address=127.0.0.1:10249
		--v=2
	)
}

start_node() {
	mkdir -p "$N_DIR" "$N_ROOT_DIR" "$N_DIR/bin" "$LOGS"
	privatize
	# shellcheck disable=SC2016 # expanded by the shell that runs it
	printf '#!/bin/sh\necho "modprobe $*: refused (kubelet-rs e2e node)" >&2\nexit 1\n' >"$N_DIR/bin/modprobe"
	chmod 0755 "$N_DIR/bin/modprobe"
	export PATH="$N_DIR/bin:$PATH"
	bash -c "source '$TESTBED/lib.sh' && krs_ensure_cgroup_root '$N_CGROUP'"

	export KRS_NET_INDEX="$N_NET_INDEX"
	CONTAINERD_STARTED=1
	"$TESTBED/containerd.sh" start "$N_INSTANCE" >/dev/null
	eval "$("$TESTBED/containerd.sh" env "$N_INSTANCE")"
	allow_node_traffic
	touch "$N_DIR/runtime-ready"
	nlog "containerd $N_INSTANCE runs; waiting for run.sh to import the images"
	until [[ -e "$N_DIR/images-ready" ]]; do
		sleep 1 &
		wait $! || true
	done

	kubelet_flags
	printf '%s\n' "$E2E_KUBELET_BIN" "${FLAGS[@]}" >"$LOGS/kubelet.args"
	nlog "starting the $E2E_KIND kubelet (log $LOGS/kubelet.log)"
	setsid "$E2E_KUBELET_BIN" "${FLAGS[@]}" </dev/null >"$LOGS/kubelet.log" 2>&1 &
	KUBELET_PID=$!
	echo "$KUBELET_PID" >"$N_DIR/kubelet.pid"

	proxy_flags
	printf '%s\n' "$KRS_E2E_UPSTREAM_BIN/kube-proxy" "${FLAGS[@]}" >"$LOGS/kube-proxy.args"
	nlog "starting kube-proxy (log $LOGS/kube-proxy.log)"
	setsid "$KRS_E2E_UPSTREAM_BIN/kube-proxy" "${FLAGS[@]}" </dev/null >"$LOGS/kube-proxy.log" 2>&1 &
	PROXY_PID=$!
	echo "$PROXY_PID" >"$N_DIR/kube-proxy.pid"
	touch "$N_READY"
}

watch_node() {
	local reported=0
	while :; do
		if ((!reported)); then
			if ! kill -0 "$KUBELET_PID" 2>/dev/null; then
				printf 'kubelet exited at %(%F %T)T\n' -1 >>"$N_DIED"
				nlog "the kubelet exited; see $LOGS/kubelet.log"
				reported=1
			elif ! kill -0 "$PROXY_PID" 2>/dev/null; then
				printf 'kube-proxy exited at %(%F %T)T\n' -1 >>"$N_DIED"
				nlog "kube-proxy exited; see $LOGS/kube-proxy.log"
				reported=1
			fi
		fi
		# In the background, so that SIGTERM is handled at once.
		sleep 2 &
		wait $! || true
	done
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT TERM
	nlog "taking the node down"
	if [[ -n "$PROXY_PID" ]]; then
		e2e_stop_pid "$PROXY_PID" kube-proxy 10
		wait "$PROXY_PID" 2>/dev/null
		# Its exit status is no verdict: without the ipset command (IPVS was never used here) its
		# IPVS step always fails. What counts is that no rule of kube-proxy's is left.
		"$KRS_E2E_UPSTREAM_BIN/kube-proxy" --cleanup >>"$LOGS/kube-proxy-cleanup.log" 2>&1
		local left
		left="$(iptables-save 2>/dev/null | grep -cE 'KUBE-(SERVICES|NODEPORTS|POSTROUTING|SVC-|SEP-|FORWARD|PROXY-CANARY|EXTERNAL-SERVICES)')"
		nlog "kube-proxy --cleanup done; kube-proxy rules left in the node's namespace: ${left:-0}"
	fi
	if [[ -n "$KUBELET_PID" ]]; then
		e2e_stop_pid "$KUBELET_PID" "$E2E_KUBELET_BIN" 30
		wait "$KUBELET_PID" 2>/dev/null
	fi
	if ((CONTAINERD_STARTED)); then
		cp -f "/run/kubelet-rs/$N_INSTANCE/containerd.log" "$LOGS/containerd.log" 2>/dev/null
		"$TESTBED/containerd.sh" purge "$N_INSTANCE" 2>>"$LOGS/containerd-stop.log" ||
			nlog "containerd.sh purge $N_INSTANCE failed; see $LOGS/containerd-stop.log"
	fi
	e2e_unmount_under "$N_DIR"
	e2e_remove_cgroup "$N_CGROUP"
	rm -rf --one-file-system "$N_DIR"
	nlog "node down"
	exit "$rc"
}

main() {
	if [[ $# -ne 1 || ! "$1" =~ ^[12]$ ]]; then
		sed -n '2p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2
		exit 2
	fi
	local v
	for v in E2E_KIND E2E_KUBELET_BIN E2E_NODES E2E_BOOTSTRAP_CONF E2E_PROXY_CONF E2E_CA \
		E2E_MACHINE_IP E2E_APISERVER_PORT E2E_ARTIFACTS; do
		[[ -n "${!v:-}" ]] || e2e_die "$v not set: node.sh is started by e2e/run.sh"
	done
	e2e_node_vars "$1"
	LOGS="$E2E_ARTIFACTS/$N_NAME"
	trap cleanup EXIT
	trap 'exit 0' TERM
	start_node
	watch_node
}

main "$@"
