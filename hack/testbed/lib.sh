# shellcheck shell=bash disable=SC2034
# Shared paths and helpers of the kubelet-rs test bed. Sourced, never run.
#
# Every path below is derived from one instance name so that several beds (ours, an upstream
# kubelet's for comparison) can live on one machine without touching each other.

KRS_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
KRS_CACHE_DIR="${KRS_CACHE_DIR:-/var/cache/kubelet-rs}"
KRS_DEFAULT_INSTANCE="krs"
# The sandbox image containerd is configured with; images.sh imports it under this name.
KRS_SANDBOX_IMAGE="registry.k8s.io/pause:3.10"
# Upstream's default service CIDR; blackholed so unrewritten Service IPs go nowhere.
KRS_SERVICE_CIDR="10.96.0.0/12"

krs_log() { printf '[testbed] %s\n' "$*" >&2; }
krs_die() {
	printf '[testbed] error: %s\n' "$*" >&2
	exit 1
}

krs_require_root() {
	[[ "$(id -u)" -eq 0 ]] || krs_die "must run as root"
}

# krs_instance_vars INSTANCE: sets the KRS_I_* variables describing one instance.
krs_instance_vars() {
	local instance="$1"
	[[ "$instance" =~ ^[a-z0-9][a-z0-9-]{0,19}$ ]] ||
		krs_die "instance name '$instance' must match [a-z0-9][a-z0-9-]{0,19}"
	KRS_I_NAME="$instance"
	KRS_I_STATE="/run/kubelet-rs/$instance"
	KRS_I_ROOT="/var/lib/kubelet-rs/$instance/containerd"
	KRS_I_SOCK="$KRS_I_STATE/containerd.sock"
	KRS_I_CONFIG="$KRS_I_STATE/config.toml"
	KRS_I_LOG="$KRS_I_STATE/containerd.log"
	KRS_I_PIDFILE="$KRS_I_STATE/containerd.pid"
	KRS_I_CD_STATE="$KRS_I_STATE/containerd"
	KRS_I_RUNC_ROOT="$KRS_I_STATE/runc"
	KRS_I_CNI_CONF_DIR="$KRS_I_STATE/cni/net.d"
	KRS_I_CNI_IPAM_DIR="$KRS_I_STATE/cni/ipam"
	KRS_I_HOSTS_DIR="$KRS_I_STATE/certs.d"
	local index
	index="$(krs_net_index "$instance")"
	KRS_I_NET_INDEX="$index"
	KRS_I_POD_SUBNET="10.88.$index.0/24"
	KRS_I_BRIDGE="krs$index"
}

# The pod network's third octet: KRS_NET_INDEX if set, else derived from the instance name so
# that different instances get different subnets and bridges without coordination.
krs_net_index() {
	local instance="$1"
	if [[ -n "${KRS_NET_INDEX:-}" ]]; then
		if ! [[ "$KRS_NET_INDEX" =~ ^[0-9]+$ ]] || ((KRS_NET_INDEX < 1 || KRS_NET_INDEX > 254)); then
			krs_die "KRS_NET_INDEX must be 1..254"
		fi
		printf '%s\n' "$KRS_NET_INDEX"
		return
	fi
	local sum
	sum="$(printf '%s' "$instance" | cksum | cut -d' ' -f1)"
	printf '%s\n' "$((sum % 200 + 20))"
}

# Fails if the process behind PIDFILE is not a containerd started with CONFIG; prints its pid.
krs_running_pid() {
	local pidfile="$1" config="$2" pid cmdline
	[[ -r "$pidfile" ]] || return 1
	pid="$(<"$pidfile")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	# Guards against a recycled pid: the process must be our containerd with our config.
	cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
	[[ "$cmdline" == *containerd*"--config $config"* ]] || return 1
	printf '%s\n' "$pid"
}

krs_host_arch() {
	case "$(uname -m)" in
	x86_64) printf 'amd64\n' ;;
	aarch64) printf 'arm64\n' ;;
	*) krs_die "unsupported machine $(uname -m)" ;;
	esac
}

krs_rust_target() {
	printf '%s-unknown-linux-gnu\n' "$(uname -m)"
}

# krs_ensure_cgroup_root NAME: creates the cgroup NAME (e.g. kubelet-rs) under every hierarchy,
# cgroup v1 or v2, since a kubelet given --cgroup-root expects it to exist already.
krs_ensure_cgroup_root() {
	local name="${1#/}" base=/sys/fs/cgroup dir
	if [[ -e "$base/cgroup.controllers" ]]; then
		mkdir -p "$base/$name"
		return 0
	fi
	for dir in "$base"/*/; do
		dir="${dir%/}"
		# Skip the symlinked aliases (cpu -> cpu,cpuacct) and anything that is not a hierarchy.
		[[ -L "$dir" || ! -e "$dir/cgroup.procs" ]] && continue
		mkdir -p "$dir/$name"
		# A new cpuset cgroup starts with no CPUs and no memory nodes: inherit the parent's.
		if [[ -e "$dir/$name/cpuset.cpus" && -z "$(<"$dir/$name/cpuset.cpus")" ]]; then
			cat "$dir/cpuset.cpus" >"$dir/$name/cpuset.cpus"
			cat "$dir/cpuset.mems" >"$dir/$name/cpuset.mems"
		fi
	done
}
