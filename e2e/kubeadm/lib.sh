# shellcheck shell=bash disable=SC2034
# Shared names and addresses of e2e/kubeadm/run.sh and e2e/kubeadm/node.sh. Sourced, never run.
#
# The kubeadm node is a network namespace of its own (ip netns krs-kubeadm) entered with a
# private mount and UTS namespace. Its only interfaces besides lo are eth0, with the node's
# address, and eth0's veth peer, both inside the node: there is no link to the machine at all, so nothing the control plane, the kubelet or a
# pod does can reach the machine's services (the project's test control plane on 6443, 10257,
# 10259, 12379 on the machine's loopback) or leave the machine, and the node has the default
# ports (6443, 2379/2380, 10250, 10257, 10259) to itself. kubectl runs inside too.

KA_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KA_REPO="$(cd "$KA_HERE/../.." && pwd)"
# shellcheck source=hack/upstream/lib.sh
source "$KA_REPO/hack/upstream/lib.sh"
KA_UPSTREAM_BIN="$KRS_UPSTREAM_BIN_DIR"
KA_KUBE_VERSION="v1.20.2"

KA_NETNS="krs-kubeadm"
KA_NODE_NAME="krs-kubeadm"
KA_NODE_IP="10.91.0.2"
KA_NODE_PREFIX=24
# kube-controller-manager gives the node a /24 of it (--allocate-node-cidrs); the CNI config the
# script installs after `kubeadm init` uses the node's podCIDR.
KA_POD_SUBNET="10.92.0.0/16"
# kubeadm's default; blackholed in the node so that an unrewritten Service IP goes nowhere.
KA_SERVICE_SUBNET="10.96.0.0/12"
KA_CNI_BRIDGE="krskadm0"

# The node's folders on the machine's disk: the upper layers of its private /etc and /usr/lib, its
# private /var/lib/kubelet, /var/lib/etcd, /var/log/pods, ..., containerd's root. Removed at the end.
KA_DIR="/var/lib/kubelet-rs/kubeadm-node"
KA_STATE="/run/kubelet-rs/kubeadm"
KA_LOCK="/run/kubelet-rs/kubeadm.lock"
# Folders of the machine the node covers with private ones of its own (bind mounts in its mount
# namespace). A bind mount needs a folder to cover: run.sh makes those the machine lacks (a fresh
# machine has no /var/lib/kubelet) for the run, empty, and removes them again.
KA_PRIVATE_DIRS=(/var/lib/kubelet /var/lib/etcd /var/lib/cni /var/log/pods /var/log/containers
	/usr/libexec/kubernetes)
# The node's pods get cgroups under this cgroup (the KubeletConfiguration's cgroupRoot), never
# under another kubelet's.
KA_CGROUP="kubelet-rs-kubeadm"
# Inside the node: containerd where kubeadm looks for it first.
KA_CRI_SOCKET="/run/containerd/containerd.sock"

ka_log() { printf '[kubeadm-e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
ka_die() {
	printf '[kubeadm-e2e %(%H:%M:%S)T] error: %s\n' -1 "$*" >&2
	exit 1
}

# crictl.py's runtime.v1 modules, generated once from proto/runtime/v1/api.proto: sets PY (the
# grpcio venv's python) and STUBS (their folder). e2e/vm/kubeadm.sh uses them too.
crictl_stubs() {
	local proto="$KA_REPO/proto/runtime/v1/api.proto" key
	PY="$("$KA_REPO/hack/testbed/grpcio-venv.sh")"
	key="$(cat "$proto" | sha256sum | cut -c1-16)"
	STUBS="${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/kubeadm/crictl-stubs-$key"
	[[ -s "$STUBS/api_pb2_grpc.py" ]] && return 0
	mkdir -p "$STUBS.tmp"
	"$PY" -m grpc_tools.protoc -I "$(dirname "$proto")" --python_out="$STUBS.tmp" \
		--grpc_python_out="$STUBS.tmp" "$proto"
	rm -rf "$STUBS"
	mv "$STUBS.tmp" "$STUBS"
}
