# shellcheck shell=bash disable=SC2034
# Names and helpers shared by e2e/node-e2e/run.sh, inside.sh, config-agent.sh and the shims.
# Sourced, never run.
#
# The node-e2e bed: one network namespace (NE2E_NETNS) entered with private mount and UTS
# namespaces. In it run e2e_node.test (which starts its own etcd and apiserver in-process and
# the kubelet under test as its child), a test-bed containerd (instance NE2E_INSTANCE) and the
# bed-side helpers. The namespace holds loopback and eth0 (NE2E_NODE_IP, the node's InternalIP),
# one end of a veth pair whose other end, eth0-end, stays in the namespace too and drops what
# the default route sends it: nothing leaves the machine.

NE2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NE2E_REPO="$(cd "$NE2E_DIR/../.." && pwd)"
# The conformance bed's helpers (sysctls, unmounts, cgroups, spec names); its own names are not
# used here.
# shellcheck source=e2e/lib.sh
source "$NE2E_REPO/e2e/lib.sh"
NE2E_NETNS="krs-ne2e"
NE2E_NODE="krs-ne2e"
NE2E_INSTANCE="krs-ne2e"
NE2E_NODE_IP="10.87.0.2"
# The CNI bridge's subnet is 10.88.<index>.0/24: 250 is used by no other bed.
NE2E_NET_INDEX=250
# Everything the run keeps on the machine, removed when it ends.
NE2E_WORK="/var/lib/kubelet-rs/ne2e"
NE2E_LOCK="/run/kubelet-rs/ne2e.lock"
# What inside.sh makes private under /etc and /var, and the node's resolv.conf (no resolver),
# which the kubelets get as --resolv-conf.
NE2E_PRIVATE="$NE2E_WORK/private"
NE2E_RESOLV_CONF="$NE2E_PRIVATE/resolv.conf"
# The suite's working folder: it writes the kubelet's kubeconfig and config file here.
NE2E_SUITE_DIR="$NE2E_WORK/suite"
NE2E_KUBELET_CONFIG="$NE2E_SUITE_DIR/kubelet-config"
# The folder e2e_node.test finds "kubelet" in (--k8s-bin-dir).
NE2E_BIN_DIR="$NE2E_WORK/bin"
# The kubeconfig the suite writes for its kubelet (its in-process apiserver serves only
# https://127.0.0.1:6443 with a bearer token, no insecure port): the bed's helpers use it too.
NE2E_KUBECONFIG="$NE2E_SUITE_DIR/kubeconfig"
# Cgroups the suite's kubelet makes at the root of each hierarchy (its cgroup root is "/" and
# its kubelet cgroup /kubelet, as the suite configures them).
NE2E_CGROUPS=(kubepods kubelet)
# Written by inside.sh once e2e_node.test runs: its pid (the kubelet's parent).
NE2E_SUITE_PID_FILE="$NE2E_WORK/suite.pid"

ne2e_log() { printf '[node-e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
ne2e_die() {
	ne2e_log "error: $*"
	exit 1
}

# The pids of the kubelet under test: children of e2e_node.test whose executable is the
# kubelet in NE2E_BIN_DIR. Nothing else is ever signalled by the bed's helpers.
ne2e_kubelet_pids() {
	local suite want p exe
	suite="$(cat "$NE2E_SUITE_PID_FILE" 2>/dev/null)" || return 0
	[[ "$suite" =~ ^[0-9]+$ ]] || return 0
	want="$(readlink -f "$NE2E_BIN_DIR/kubelet")"
	for p in $(ps -o pid= --ppid "$suite" 2>/dev/null); do
		exe="$(readlink -f "/proc/$p/exe" 2>/dev/null)" || continue
		[[ "$exe" == "$want" ]] && printf '%s\n' "$p"
	done
}

# ne2e_restart_kubelet WHY: stops the kubelet under test with SIGTERM (SIGKILL after 30 s).
# e2e_node.test's service monitor sees it gone and starts it again with the same command line,
# which reads the config file anew.
ne2e_restart_kubelet() {
	local why="$1" pids p deadline
	mapfile -t pids < <(ne2e_kubelet_pids)
	if ((${#pids[@]} == 0)); then
		ne2e_log "restart ($why): no kubelet runs"
		return 0
	fi
	ne2e_log "restart ($why): stopping kubelet pid ${pids[*]}"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	deadline=$((SECONDS + 30))
	for p in "${pids[@]}"; do
		while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
	done
	return 0
}
