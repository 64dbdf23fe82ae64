# shellcheck shell=bash disable=SC2034
# Shared names, paths and helpers of the VM bed (e2e/vm/run.sh and its parts). Sourced, never run.
#
# The VMs sit on a bridge inside a network namespace of the bed's own (ip netns $VM_NETNS): the
# bridge has 10.99.0.1, VM i has 10.99.0.(10+i) and the name and hostname vmI. The namespace has
# no link to the machine, so nothing a VM does reaches the machine's services or leaves it; the
# bed reaches the VMs by running ssh inside that namespace.

VM_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VM_REPO="$(cd "$VM_HERE/../.." && pwd)"

VM_CACHE="${KRS_VM_CACHE:-${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/vm}"
# Per-run state: overlays, consoles, pid files, the key. Removed by `down`.
VM_RUN="${KRS_VM_RUN_DIR:-/var/tmp/kubelet-rs-vm}"
VM_MIRROR="${KRS_VM_MIRROR:-http://deb.debian.org/debian}"
VM_NETNS="${KRS_VM_NETNS:-krs-vm}"
VM_BRIDGE="krsvm0"
VM_NET_PREFIX="10.99.0"
VM_GATEWAY="$VM_NET_PREFIX.1"
# Pods of VM i get 10.244.i.0/24 (bridge CNI, host-local IPAM); every VM routes the other VMs'
# /24s to them, so pod traffic crosses VMs without an overlay.
VM_POD_SUBNET="10.244.0.0/16"
VM_SERVICE_SUBNET="10.96.0.0/12"
VM_T0="${VM_T0:-$SECONDS}"

vm_log() { printf '[vm %(%H:%M:%S)T +%ds] %s\n' -1 "$((SECONDS - VM_T0))" "$*" >&2; }
vm_die() {
	printf '[vm %(%H:%M:%S)T +%ds] error: %s\n' -1 "$((SECONDS - VM_T0))" "$*" >&2
	exit 1
}

vm_require_root() { [[ $EUID -eq 0 ]] || vm_die "run as root (VMs, a network namespace, taps)"; }

vm_ip() { printf '%s.%d\n' "$VM_NET_PREFIX" "$((10 + $1))"; }
vm_pod_cidr() { printf '10.244.%d.0/24\n' "$1"; }
vm_mac() { printf '52:54:00:99:00:%02x\n' "$1"; }
# vm_index NAME: 3 for vm3; fails for anything else.
vm_index() {
	[[ "$1" =~ ^vm([1-9][0-9]?)$ ]] || return 1
	printf '%s\n' "${BASH_REMATCH[1]}"
}

# Suite the running VMs were booted from, and how many there are (written by `up`).
vm_nodes() { cat "$VM_RUN/nodes" 2>/dev/null || echo 0; }
vm_suite() { cat "$VM_RUN/suite" 2>/dev/null || echo bookworm; }
vm_image_dir() { printf '%s/%s\n' "$VM_CACHE" "$1"; }

VM_SSH_OPTS=(-q -o BatchMode=yes -o ConnectTimeout=5 -o ServerAliveInterval=10
	-o ServerAliveCountMax=6 -o LogLevel=ERROR)

# vm_ssh INDEX [SSH ARGS...] -- runs ssh to VM INDEX inside the bed's namespace, with the host key
# the image was built with (its known_hosts) and the bed's client key.
vm_ssh() {
	local i="$1" dir
	shift
	dir="$(vm_image_dir "$(vm_suite)")"
	ip netns exec "$VM_NETNS" ssh "${VM_SSH_OPTS[@]}" -i "$dir/id_ed25519" \
		-o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes \
		"root@$(vm_ip "$i")" "$@"
}

# vm_copy INDEX SRC... DEST: copies files into VM INDEX (DEST is a path in the VM).
vm_copy() {
	local i="$1" dir
	shift
	local dest="${*: -1}" srcs=("${@:1:$#-1}")
	dir="$(vm_image_dir "$(vm_suite)")"
	ip netns exec "$VM_NETNS" scp "${VM_SSH_OPTS[@]}" -i "$dir/id_ed25519" \
		-o UserKnownHostsFile="$dir/known_hosts" -o StrictHostKeyChecking=yes \
		"${srcs[@]}" "root@$(vm_ip "$i"):$dest"
}

# vm_wait INDEX SECONDS SHELL: until SHELL succeeds in VM INDEX (tried every 3 s); fails once
# SECONDS have passed.
vm_wait() {
	local i="$1" deadline=$((SECONDS + $2))
	until vm_ssh "$i" "$3" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 3
	done
}

# vm_build_shares: `up` arguments that share, read-only, the folders a VM must see at the
# machine's paths to run what was built here: the checkout, $CARGO_TARGET_DIR and
# $KRS_CACHE_DIR (one share when one holds another).
vm_build_shares() {
	local dirs=("$VM_REPO") d k kept=()
	dirs+=("$(realpath "$CARGO_TARGET_DIR")" "$(realpath "$KRS_CACHE_DIR")")
	for d in "${dirs[@]}"; do
		for k in "${dirs[@]}"; do
			[[ "$d" == "$k"/* ]] && continue 2
		done
		[[ " ${kept[*]} " == *" $d "* ]] || kept+=("$d")
	done
	printf -- '--share\n%s\n' "${kept[@]}"
}

# Where a VM of `test` or `conformance` finds the image tarballs' list (KRS_PREBUILT_IMAGES).
VM_IMAGE_LIST=/var/tmp/krs-vm-images.list

# vm_build_begin: the machine's side of running in a VM what is built here. Refuses a bed that is
# up (before minutes of building), sets KRS_CACHE_DIR and CARGO_TARGET_DIR as hack/test.sh does,
# sources hack/upstream/lib.sh, and makes VM_BUILT_LIST, the file for the image tarballs' list
# (images.sh --list), removed on exit.
vm_build_begin() {
	[[ ! -e "$VM_RUN/nodes" ]] ||
		vm_die "a VM bed is up already (e2e/vm/run.sh status); e2e/vm/run.sh down first"
	export KRS_CACHE_DIR="${KRS_CACHE_DIR:-/var/cache/kubelet-rs}"
	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$KRS_CACHE_DIR/target}"
	mkdir -p "$CARGO_TARGET_DIR"
	# shellcheck source=hack/upstream/lib.sh
	source "$VM_REPO/hack/upstream/lib.sh"
	VM_BUILT_LIST="$(mktemp /var/tmp/krs-vm-images.XXXXXX)"
	# shellcheck disable=SC2064 # this very file goes on every exit path
	trap "rm -f '$VM_BUILT_LIST'" EXIT
}

# vm_up_built SUITE MIB KEEP [UP ARGS...]: vm1 up (e2e/vm/run.sh up) with the build shares, then
# UP ARGS (more shares), and VM_BUILT_LIST at VM_IMAGE_LIST in it; taken down on exit unless KEEP.
vm_up_built() {
	local suite="$1" memory="$2" keep="$3" shares=()
	shift 3
	mapfile -t shares < <(vm_build_shares)
	"$VM_HERE/run.sh" up --nodes 1 --suite "$suite" --memory "$memory" "${shares[@]}" "$@"
	# shellcheck disable=SC2064 # expand now
	((keep)) || trap "rm -f '$VM_BUILT_LIST'; '$VM_HERE/run.sh' down" EXIT
	vm_ssh 1 "cat >$VM_IMAGE_LIST" <"$VM_BUILT_LIST"
}

# vm_built_env: export lines for a shell in the VM: the caches at the machine's paths, the
# upstream binaries on PATH, the prebuilt images, and time limits for software emulation
# (kube-apiserver's bootstrap alone can outlast hack/cluster/up.sh's 120 s, and importing agnhost
# image_lib's 120 s).
vm_built_env() {
	printf 'export %s=%q\n' KRS_CACHE_DIR "$KRS_CACHE_DIR" CARGO_TARGET_DIR "$CARGO_TARGET_DIR" \
		KRS_UPSTREAM_CACHE "$KRS_UPSTREAM_CACHE" KRS_PREBUILT_IMAGES "$VM_IMAGE_LIST" \
		KRS_CLUSTER_START_TIMEOUT 600 KRS_CTR_TIMEOUT 900
	printf 'export PATH=%q:"$PATH"\n' "$KRS_UPSTREAM_BIN_DIR"
}
