#!/usr/bin/env bash
# Usage: e2e/vm/run.sh up [--nodes N] [--suite bookworm|trixie] [--memory MIB] [--share[-rw] DIR]...
#        e2e/vm/run.sh exec NODE -- CMD...
#        e2e/vm/run.sh kubeadm [--check]
#        e2e/vm/run.sh smoke [--suite bookworm|trixie]
#        e2e/vm/run.sh test [--suite bookworm|trixie] [--only T,...] [--keep] [-- TEST FILTER...]
#        e2e/vm/run.sh conformance --kubelet ours|upstream [--suite S] [--parallel N] [--keep]
#        e2e/vm/run.sh status
#        e2e/vm/run.sh down
#
# The VM bed: Debian VMs under qemu with systemd as PID 1 on cgroup v2 only, our kubelet
# installed from our Debian package. As root. e2e/vm/README.md tells the whole story.
#
#   up      boots N VMs (default 1) named vm1..vmN from the suite's image (e2e/vm/rootfs.sh, cached
#           under $KRS_CACHE_DIR/vm), KVM when a probe boot shows it works, TCG otherwise; each
#           gets 10.99.0.(10+i) on a bridge in the network namespace krs-vm, pods in
#           10.244.i.0/24 with routes to the other VMs' pod subnets; then installs our .deb
#           (packaging/deb/build.sh, or $KRS_VM_DEB) with dpkg and imports the test bed's images
#           (pause, busybox: hack/testbed/images.sh --list). Default memory 2048 MiB per VM.
#           --share DIR (read-only) and --share-rw DIR mount the machine's DIR at the same path in
#           every VM (virtio 9p), for `test` and `conformance`.
#   exec    runs CMD as root in NODE (vm1..) over ssh and exits with its status
#   kubeadm kubeadm v1.20.2 init on vm1 and join on the others, our kubelet on each
#           (e2e/vm/kubeadm.sh); --check then judges the cluster: a Deployment over the nodes,
#           pod-to-pod traffic across VMs, logs/exec/port-forward on vm2, kubeadm reset on vm2
#   smoke   the CI smoke (e2e/vm/smoke.sh): on vm1, the kubelet of the .deb runs a static pod with
#           limits on the systemd driver; checks its cgroup v2 files and the kubelet's healthz
#   test    the project's cgroup-touching integration tests, the same test binaries, run inside a
#           cgroup v2 VM (e2e/vm/test.sh): systemd driver, OOM, eviction, resize, node shutdown,
#           stats
#   conformance  e2e/run.sh --suite node-conformance inside a cgroup v2 VM, against our kubelet
#           or upstream's (e2e/vm/conformance.sh); results in
#           e2e/results/node-conformance-cgroupv2/
#   status  the VMs that run and their addresses
#   down    stops every VM the bed started (by its pid file) and removes the namespace, taps,
#           bridge and run folder; idempotent, and run on every failed `up`
#
# Env: KRS_VM_ACCEL (kvm|tcg: skip the probe), KRS_VM_DEB (a .deb to install instead of building
# one), KRS_DEB_KUBELET (the kubelet binary build.sh packages), KRS_VM_BOOT_TIMEOUT (seconds a VM
# has to answer ssh, default 300), KRS_VM_RUN_DIR (run folder, default /var/tmp/kubelet-rs-vm),
# KRS_VM_CACHE (image cache), KRS_VM_MIRROR (Debian mirror for the image), KRS_VM_NETNS (the
# bed's network namespace, default krs-vm: with another KRS_VM_RUN_DIR, a second bed beside the
# first).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"

BOOT_TIMEOUT="${KRS_VM_BOOT_TIMEOUT:-300}"
KVM_PROBE_TIMEOUT=10

usage() {
	sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

# probe_accel IMAGE_DIR: prints kvm when a kernel boots to its end under KVM in time, else tcg.
# The probe boots the kernel alone: with no root it panics at once, and -no-reboot ends qemu.
probe_accel() {
	local dir="$1"
	if [[ -n "${KRS_VM_ACCEL:-}" ]]; then
		vm_log "accelerator: $KRS_VM_ACCEL (KRS_VM_ACCEL)"
		printf '%s\n' "$KRS_VM_ACCEL"
		return 0
	fi
	if [[ -r /dev/kvm && -w /dev/kvm ]]; then
		local log="$VM_RUN/kvm-probe.log" t0=$SECONDS status=0
		timeout "$KVM_PROBE_TIMEOUT" qemu-system-x86_64 -accel kvm -m 256 -no-reboot \
			-kernel "$dir/vmlinuz" -append "console=ttyS0 panic=-1" -serial "file:$log" \
			-display none -monitor none >"$log.err" 2>&1 || status=$?
		if grep -q 'Kernel panic' "$log" 2>/dev/null; then
			vm_log "accelerator: KVM (a probe boot reached the kernel's end in $((SECONDS - t0)) s)"
			echo kvm
			return 0
		fi
		if ((status == 124)); then
			vm_log "accelerator: TCG (software emulation): a probe boot under KVM printed nothing in ${KVM_PROBE_TIMEOUT} s"
		else
			vm_log "accelerator: TCG (software emulation): qemu under KVM failed (status $status: $(tail -1 "$log.err"))"
		fi
	else
		vm_log "accelerator: TCG (software emulation): /dev/kvm is not usable"
	fi
	echo tcg
}

# What the bed runs on the machine: qemu, qemu-img, ssh/scp (the image build installs mmdebstrap).
ensure_tools() {
	command -v qemu-system-x86_64 >/dev/null && command -v qemu-img >/dev/null &&
		command -v ssh >/dev/null && return 0
	vm_log "installing qemu-system-x86, qemu-utils and openssh-client"
	apt-get update -qq
	local from=()
	# A machine whose qemu-utils came from backports (these machines ship qemu-img 10 from
	# bookworm-backports) cannot take the suite's qemu-system-x86 beside it: qemu-utils 10
	# breaks qemu-system-common before 8.0. qemu then comes from that same backports suite.
	if [[ "$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null)" == *~bpo* ]]; then
		from=(-t "$(backports_suite)")
	fi
	local status=0
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${from[@]}" \
		qemu-system-x86 qemu-utils openssh-client >/dev/null || status=$?
	drop_backports_source
	return "$status"
}

BACKPORTS_LIST=/etc/apt/sources.list.d/kubelet-rs-vm-backports.list

# backports_suite: "<codename>-backports", made known to apt for this install when no source
# the machine has already names it (drop_backports_source takes that away again).
backports_suite() {
	local codename suite sources
	codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
	[[ -n "$codename" ]] || vm_die "cannot tell the machine's Debian suite from /etc/os-release"
	suite="$codename-backports"
	sources="$(apt-cache policy 2>/dev/null)"
	if [[ "$sources" != *" $suite/"* ]]; then
		vm_log "qemu-utils came from $suite: adding it as a package source for this install"
		echo "deb http://deb.debian.org/debian $suite main" >"$BACKPORTS_LIST"
		apt-get update -qq >&2 || {
			drop_backports_source
			vm_die "apt-get update failed with $suite as a source"
		}
	fi
	echo "$suite"
}

drop_backports_source() {
	[[ -e "$BACKPORTS_LIST" ]] || return 0
	rm -f "$BACKPORTS_LIST"
	apt-get update -qq >&2 || true
}

make_network() {
	local nodes="$1" i
	ip netns add "$VM_NETNS"
	ip -n "$VM_NETNS" link set lo up
	ip -n "$VM_NETNS" link add "$VM_BRIDGE" type bridge
	ip -n "$VM_NETNS" addr add "$VM_GATEWAY/24" dev "$VM_BRIDGE"
	ip -n "$VM_NETNS" link set "$VM_BRIDGE" up
	for ((i = 1; i <= nodes; i++)); do
		ip -n "$VM_NETNS" tuntap add dev "tap$i" mode tap
		ip -n "$VM_NETNS" link set "tap$i" master "$VM_BRIDGE" up
	done
}

# routes_for INDEX NODES: krs.routes= value, the other VMs' pod subnets through them.
routes_for() {
	local self="$1" nodes="$2" j out=()
	for ((j = 1; j <= nodes; j++)); do
		((j == self)) || out+=("$(vm_pod_cidr "$j")@$(vm_ip "$j")")
	done
	local IFS=,
	printf '%s\n' "${out[*]}"
}

boot_vm() {
	local i="$1" nodes="$2" dir="$3" accel="$4" memory="$5" cpu=()
	qemu-img create -q -f qcow2 -b "$dir/base.img" -F raw "$VM_RUN/vm$i.qcow2"
	[[ "$accel" == tcg ]] && cpu=(-cpu max)
	local cmdline=(console=ttyS0 root=LABEL=root rw net.ifnames=0 panic=-1
		systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all
		"krs.name=vm$i" "krs.ip=$(vm_ip "$i")/24" "krs.gw=$VM_GATEWAY")
	local routes shares=() tag mode path
	routes="$(routes_for "$i" "$nodes")"
	[[ -z "$routes" ]] || cmdline+=("krs.routes=$routes")
	while read -r tag mode path; do
		local ro=on
		[[ "$mode" == rw ]] && ro=off
		shares+=(-virtfs "local,path=$path,mount_tag=$tag,security_model=none,readonly=$ro")
	done < <(cat "$VM_RUN/shares" 2>/dev/null)
	ip netns exec "$VM_NETNS" qemu-system-x86_64 -accel "$accel" "${cpu[@]}" -smp 2 -m "$memory" \
		-name "vm$i" -no-reboot -kernel "$dir/vmlinuz" -initrd "$dir/initrd.img" \
		-append "${cmdline[*]}" \
		-drive "file=$VM_RUN/vm$i.qcow2,if=virtio,format=qcow2,cache=unsafe" \
		-netdev "tap,id=n0,ifname=tap$i,script=no,downscript=no" \
		-device "virtio-net-pci,netdev=n0,mac=$(vm_mac "$i")" \
		"${shares[@]}" \
		-serial "file:$VM_RUN/vm$i.console" -monitor none -display none \
		-daemonize -pidfile "$VM_RUN/vm$i.pid"
}

# wait_ssh INDEX: until VM INDEX answers ssh; past the deadline names it with its console's end.
wait_ssh() {
	local i="$1" deadline=$((SECONDS + BOOT_TIMEOUT)) t0=$SECONDS
	until vm_ssh "$i" true 2>/dev/null; do
		if ! kill -0 "$(cat "$VM_RUN/vm$i.pid" 2>/dev/null || echo 0)" 2>/dev/null; then
			tail -20 "$VM_RUN/vm$i.console" >&2 || true
			vm_die "vm$i: qemu exited before the VM answered ssh (console above)"
		fi
		if ((SECONDS >= deadline)); then
			tail -20 "$VM_RUN/vm$i.console" >&2 || true
			vm_die "vm$i did not answer ssh within ${BOOT_TIMEOUT} s (last console lines above)"
		fi
		sleep 2
	done
	vm_log "vm$i up: ssh answers $((SECONDS - t0)) s after the wait began ($(vm_ssh "$i" \
		'printf "%s, PID 1 %s, %s" "$(uname -r)" "$(ps -o comm= -p 1)" "$(stat -fc %T /sys/fs/cgroup)"'))"
}

# mount_shares INDEX: the shares of `up` mounted in VM INDEX at the machine's paths. Read-only
# shares are cached by the VM (nothing changes them while it runs); a read-write one is not.
mount_shares() {
	local i="$1" tag mode path opts
	while read -r tag mode path; do
		opts=trans=virtio,version=9p2000.L,msize=524288
		if [[ "$mode" == ro ]]; then opts+=,ro,cache=loose; else opts+=,cache=none; fi
		vm_ssh "$i" "mkdir -p $(printf %q "$path") && mount -t 9p -o $opts $tag $(printf %q "$path")" </dev/null ||
			vm_die "vm$i: mounting $path (9p $tag) failed"
	done < <(cat "$VM_RUN/shares" 2>/dev/null)
}

# The CNI config of VM INDEX: a bridge with the VM's own pod subnet, no masquerade (the VMs
# route each other's pod subnets).
cni_config() {
	cat <<EOF
{
  "cniVersion": "0.4.0",
  "name": "krs-vm",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$(vm_pod_cidr "$1")" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

build_deb() {
	if [[ -n "${KRS_VM_DEB:-}" ]]; then
		[[ -s "$KRS_VM_DEB" ]] || vm_die "KRS_VM_DEB=$KRS_VM_DEB is not a file"
		printf '%s\n' "$KRS_VM_DEB"
		return 0
	fi
	vm_log "building our Debian package (packaging/deb/build.sh)"
	# In the bed's own folder: a second bed may be building its package at the same time.
	KRS_DEB_DIST="$VM_RUN/deb" "$VM_REPO/packaging/deb/build.sh" | tail -1
}

# provision INDEX DEB IMAGE_LIST: our package installed with dpkg, the images imported, CNI.
provision() {
	local i="$1" deb="$2" list="$3" tars=() line t0=$SECONDS
	while read -r line; do tars+=("${line%% *}"); done <"$list"
	vm_ssh "$i" 'mkdir -p /var/tmp/krs-vm /etc/cni/net.d'
	vm_copy "$i" "$deb" "${tars[@]}" /var/tmp/krs-vm/
	cni_config "$i" | vm_ssh "$i" 'cat >/etc/cni/net.d/10-krs-vm.conflist'
	vm_ssh "$i" "DEBIAN_FRONTEND=noninteractive dpkg -i /var/tmp/krs-vm/$(basename "$deb") >/dev/null" ||
		vm_die "vm$i: dpkg -i $(basename "$deb") failed"
	local tar
	for tar in "${tars[@]}"; do
		vm_ssh "$i" "ctr -n k8s.io images import --all-platforms /var/tmp/krs-vm/$(basename "$tar") >/dev/null" ||
			vm_die "vm$i: importing $(basename "$tar") failed"
	done
	vm_ssh "$i" 'rm -rf /var/tmp/krs-vm'
	vm_log "vm$i provisioned in $((SECONDS - t0)) s: $(vm_ssh "$i" 'dpkg-query -W -f="\${Package} \${Version}" kubelet-rs'), ${#tars[@]} image tarballs imported"
}

cmd_up() {
	local nodes=1 suite=bookworm memory=2048 shares=()
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--share | --share-rw)
			local dir="${2:?$1 takes a folder}"
			[[ -d "$dir" && "$dir" == /* ]] || vm_die "$1 $dir: not an absolute path to a folder"
			local mode=ro
			[[ "$1" == --share-rw ]] && mode=rw
			shares+=("share${#shares[@]} $mode $dir")
			shift 2
			;;
		--nodes) nodes="${2:?--nodes takes a value}"; shift 2 ;;
		--suite) suite="${2:?--suite takes a value}"; shift 2 ;;
		--memory) memory="${2:?--memory takes a value}"; shift 2 ;;
		*) usage; exit 2 ;;
		esac
	done
	[[ "$nodes" =~ ^[1-9]$ ]] || vm_die "--nodes takes 1..9"
	[[ "$memory" =~ ^[0-9]+$ ]] || vm_die "--memory takes MiB"
	vm_require_root
	if [[ -e "$VM_RUN/nodes" ]] || ip netns list | grep -qw "$VM_NETNS"; then
		vm_die "a VM bed is up already (e2e/vm/run.sh status); e2e/vm/run.sh down first"
	fi
	ensure_tools
	trap 'status=$?; if ((status != 0)); then vm_log "up failed: taking the bed down"; cmd_down; fi' EXIT
	local dir accel deb list i
	dir="$("$HERE/rootfs.sh" "$suite")"
	mkdir -p "$VM_RUN"
	echo "$suite" >"$VM_RUN/suite"
	echo "$nodes" >"$VM_RUN/nodes"
	: >"$VM_RUN/shares"
	((${#shares[@]} == 0)) || printf '%s\n' "${shares[@]}" >"$VM_RUN/shares"
	accel="$(probe_accel "$dir")"
	deb="$(build_deb)"
	list="$VM_RUN/images.list"
	"$VM_REPO/hack/testbed/images.sh" --list "$list" 2>/dev/null
	make_network "$nodes"
	vm_log "booting $nodes VM(s) of $suite under $accel, ${memory} MiB each"
	for ((i = 1; i <= nodes; i++)); do boot_vm "$i" "$nodes" "$dir" "$accel" "$memory"; done
	for ((i = 1; i <= nodes; i++)); do wait_ssh "$i" && mount_shares "$i"; done
	for ((i = 1; i <= nodes; i++)); do provision "$i" "$deb" "$list"; done
	trap - EXIT
	vm_log "up: $nodes VM(s) in $((SECONDS - VM_T0)) s"
	cmd_status
}

cmd_status() {
	local nodes i pid state
	nodes="$(vm_nodes)"
	if ((nodes == 0)); then
		echo "no VM bed is up"
		return 0
	fi
	for ((i = 1; i <= nodes; i++)); do
		pid="$(cat "$VM_RUN/vm$i.pid" 2>/dev/null || true)"
		state=stopped
		[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && state="running (qemu pid $pid)"
		printf 'vm%d %s %s %s\n' "$i" "$(vm_ip "$i")" "$(vm_suite)" "$state"
	done
}

cmd_exec() {
	[[ $# -ge 3 && "$2" == -- ]] || {
		usage
		exit 2
	}
	local i
	i="$(vm_index "$1")" || vm_die "no such VM: $1 (vm1..vm$(vm_nodes))"
	((i <= $(vm_nodes))) || vm_die "no such VM: $1 (vm1..vm$(vm_nodes))"
	shift 2
	local cmd
	printf -v cmd '%q ' "$@"
	vm_ssh "$i" "$cmd"
}

# Stops only the qemu processes whose pid files the bed wrote, and only if they are qemu.
cmd_down() {
	local pidfile pid i
	for pidfile in "$VM_RUN"/vm*.pid; do
		[[ -e "$pidfile" ]] || continue
		pid="$(cat "$pidfile" 2>/dev/null || true)"
		[[ "$pid" =~ ^[0-9]+$ ]] || continue
		[[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == qemu-system-* ]] || continue
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	done
	if ip netns list | grep -qw "$VM_NETNS"; then
		ip netns delete "$VM_NETNS"
	fi
	rm -rf "$VM_RUN"
	vm_log "down: no VM, tap, bridge or namespace of the bed is left"
}

main() {
	local cmd="${1:-}"
	[[ $# -gt 0 ]] && shift
	case "$cmd" in
	up) cmd_up "$@" ;;
	exec) cmd_exec "$@" ;;
	kubeadm) exec "$HERE/kubeadm.sh" "$@" ;;
	smoke) vm_require_root; exec "$HERE/smoke.sh" "$@" ;;
	test) vm_require_root; exec "$HERE/test.sh" "$@" ;;
	conformance) vm_require_root; exec "$HERE/conformance.sh" "$@" ;;
	status) cmd_status ;;
	down) vm_require_root; cmd_down ;;
	*) usage; exit 2 ;;
	esac
}

main "$@"
