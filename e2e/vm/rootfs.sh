#!/usr/bin/env bash
# Usage: e2e/vm/rootfs.sh SUITE      (bookworm or trixie; run by e2e/vm/run.sh up)
#
# Builds the VM bed's disk image for a Debian suite and prints its folder,
# $KRS_CACHE_DIR/vm/SUITE (default /var/cache/kubelet-rs/vm/SUITE):
#   base.img             ext4 root file system (raw, sparse, labelled "root"), never written by a
#                        VM: each VM boots a qcow2 overlay of it
#   vmlinuz, initrd.img  the suite's linux-image-amd64, booted directly by qemu
#   id_ed25519[.pub]     the bed's ssh key, authorized for root in the image
#   known_hosts          the image's ssh host key for every VM address (10.99.0.*)
# The root is made by mmdebstrap from the Debian registry: systemd as PID 1, openssh-server,
# containerd, runc and CNI plugins of that suite, and what kubeadm's packages depend on
# (iptables, conntrack, ethtool, socat, kmod), plus the bed's files from e2e/vm/guest. Our kubelet
# is not in it: `up` installs it from our Debian package into each VM, as a user would.
# Cached: a folder whose stamp matches this script, the guest files and SUITE is used as it is.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"

PACKAGES=(
	systemd systemd-sysv udev dbus kmod procps util-linux mount iproute2 openssh-server
	linux-image-amd64 initramfs-tools
	containerd runc containernetworking-plugins
	iptables conntrack ethtool socat
	# for the bed's own checks inside the VMs
	curl jq
	# e2e/kubeadm's crictl stand-in (e2e/vm/kubeadm.sh)
	python3
	# the integration tests' own bed (e2e/vm/test.sh): hack/cluster/up.sh's etcd and certificates,
	# what the tests run beside the kubelet
	etcd-server openssl busybox-static dbus-bin
	# e2e/run.sh in a VM (e2e/vm/conformance.sh) records the harness's commit
	git
)
# Registries pods may name; each is pinned to a closed port in the VMs' containerd.
REGISTRIES=(docker.io registry-1.docker.io registry.k8s.io k8s.gcr.io gcr.io quay.io ghcr.io
	invalid.com e2e.registry.invalid)
IMAGE_SIZE="${KRS_VM_IMAGE_SIZE:-6G}"

usage() { echo "usage: $0 bookworm|trixie" >&2; }

stamp_of() {
	local suite="$1"
	{
		printf '%s\n' "$suite" "$VM_MIRROR" "$IMAGE_SIZE"
		cat "${BASH_SOURCE[0]}" "$HERE"/guest/*
	} | sha256sum | cut -d' ' -f1
}

# customize ROOT: the bed's settings inside the unpacked root.
customize() {
	local root="$1" dir="$2" reg
	install -D -m 0755 "$HERE/guest/krs-vm-net" "$root/usr/local/sbin/krs-vm-net"
	install -D -m 0644 "$HERE/guest/krs-vm-net.service" "$root/etc/systemd/system/krs-vm-net.service"
	ln -sf /etc/systemd/system/krs-vm-net.service \
		"$root/etc/systemd/system/multi-user.target.wants/krs-vm-net.service"
	install -D -m 0644 "$HERE/guest/containerd.toml" "$root/etc/containerd/config.toml"
	for reg in "${REGISTRIES[@]}"; do
		mkdir -p "$root/etc/containerd/certs.d/$reg"
		printf '%s\n' 'server = "http://127.0.0.1:1"' '' '[host."http://127.0.0.1:1"]' \
			'  capabilities = ["pull", "resolve"]' >"$root/etc/containerd/certs.d/$reg/hosts.toml"
	done
	echo 'LABEL=root / ext4 defaults 0 1' >"$root/etc/fstab"
	# kubeadm's preflight and kube-proxy need these at boot, as on any kubeadm node.
	printf '%s\n' overlay br_netfilter >"$root/etc/modules-load.d/k8s.conf"
	printf '%s\n' 'net.ipv4.ip_forward = 1' 'net.bridge.bridge-nf-call-iptables = 1' \
		'net.bridge.bridge-nf-call-ip6tables = 1' >"$root/etc/sysctl.d/k8s.conf"
	# The serial console is the bed's view of a VM that does not come up; root logs in there
	# without a password (the VMs are reachable only from the bed's namespace).
	chroot "$root" passwd -d root >/dev/null
	install -d -m 0700 "$root/root/.ssh"
	install -m 0600 "$dir/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
	printf '%s.* %s\n' "$VM_NET_PREFIX" "$(cut -d' ' -f1-2 "$root/etc/ssh/ssh_host_ed25519_key.pub")" \
		>"$dir/known_hosts"
	# hack/cluster/up.sh starts an etcd of its own when a test needs one; the package's service
	# would hold the default ports for nothing.
	rm -f "$root/etc/systemd/system/multi-user.target.wants/etcd.service"
	# Nothing to fetch from inside a VM: apt's timers and the like only cost time under TCG.
	rm -f "$root"/etc/systemd/system/timers.target.wants/*
}

main() {
	[[ $# -eq 1 ]] || {
		usage
		exit 2
	}
	local suite="$1"
	case "$suite" in bookworm | trixie) ;; *) usage; exit 2 ;; esac
	vm_require_root
	local dir stamp
	dir="$(vm_image_dir "$suite")"
	stamp="$(stamp_of "$suite")"
	if [[ -s "$dir/base.img" && "$(cat "$dir/stamp" 2>/dev/null)" == "$stamp" ]]; then
		vm_log "root file system of $suite: cached ($dir)"
		printf '%s\n' "$dir"
		return 0
	fi
	command -v mmdebstrap >/dev/null && command -v mke2fs >/dev/null || {
		vm_log "installing mmdebstrap"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			mmdebstrap e2fsprogs >/dev/null
	}
	local t0=$SECONDS tmp root
	mkdir -p "$VM_CACHE"
	tmp="$(mktemp -d "$VM_CACHE/.build-$suite.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: this very folder goes on every exit path
	trap "rm -rf '$tmp'" EXIT
	root="$tmp/root"
	vm_log "building the root file system of $suite (mmdebstrap from $VM_MIRROR)"
	local packages
	packages="$(IFS=,; echo "${PACKAGES[*]}")"
	if ! mmdebstrap --mode=root --variant=minbase --include="$packages" \
		"$suite" "$root" "$VM_MIRROR" >"$tmp/mmdebstrap.log" 2>&1; then
		tail -20 "$tmp/mmdebstrap.log" >&2
		vm_die "mmdebstrap failed for $suite"
	fi
	ssh-keygen -q -t ed25519 -N '' -C kubelet-rs-vm-bed -f "$tmp/id_ed25519"
	customize "$root" "$tmp"
	cp "$root"/boot/vmlinuz-* "$tmp/vmlinuz"
	cp "$root"/boot/initrd.img-* "$tmp/initrd.img"
	mke2fs -q -t ext4 -L root -d "$root" "$tmp/base.img" "$IMAGE_SIZE" >/dev/null
	rm -rf "$root"
	echo "$stamp" >"$tmp/stamp"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	vm_log "root file system of $suite built in $((SECONDS - t0)) s ($(du -sh "$dir/base.img" | cut -f1) used)"
	printf '%s\n' "$dir"
}

main "$@"
