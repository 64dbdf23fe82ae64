#!/usr/bin/env bash
# Usage: images/node/build.sh            (as root; env below)
#
# Builds the kind node image whose kubelet is kubelet-rs, as an OCI image layout tarball, with no
# Docker daemon and no registry:
#   1. a Debian bookworm root (mmdebstrap, minbase, no recommends, no docs) with systemd as init,
#      containerd, runc and the CNI plugins from Debian (cached: $NODE_CACHE/base-<key>.tar);
#   2. our files (images/node/files: entrypoint, units, drop-ins, containerd config) and kind's
#      layout: /kind/version, the kubelet enabled, containerd enabled, /etc/kubernetes/manifests;
#   3. /usr/bin/kubelet (kubelet-rs, stripped), /usr/bin/kubeadm and /usr/bin/kubectl (v1.20.2 from
#      $KRS_UPSTREAM_CACHE/bin: the only kubeadm this machine can have);
#   4. the control-plane images (e2e/kubeadm/images.sh) imported into the image's own containerd
#      store (/var/lib/containerd, namespace k8s.io, unpacked for overlayfs) as kind preloads them;
#   5. one layer written by hack/testbed/oci_image.py with kind's entrypoint, cmd and stop signal.
# Prints the tarball's path, its manifest digest and its size. Output: $NODE_CACHE/kubelet-rs-node.tar
#
# Env: NODE_CACHE (default /var/cache/kubelet-rs/node-image), KRS_KUBELET (default: this
# checkout's, `cargo build --release`, into $CARGO_TARGET_DIR or ./target), NODE_IMAGE_NAME (default
# docker.io/kubelet-rs/node:v1.20.2), KRS_UPSTREAM_CACHE (default $KRS_CACHE_DIR/upstream).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TESTBED="$REPO/hack/testbed"
# shellcheck source=hack/testbed/lib.sh
source "$TESTBED/lib.sh"

NODE_CACHE="${NODE_CACHE:-$KRS_CACHE_DIR/node-image}"
KUBE_VERSION="v1.20.2"
# shellcheck source=hack/upstream/lib.sh
source "$REPO/hack/upstream/lib.sh"
IMAGE_NAME="${NODE_IMAGE_NAME:-docker.io/kubelet-rs/node:$KUBE_VERSION}"
OUT="$NODE_CACHE/kubelet-rs-node.tar"
SUITE=bookworm
MIRRORS=(
	"deb http://deb.debian.org/debian $SUITE main"
	"deb http://deb.debian.org/debian $SUITE-updates main"
	"deb http://deb.debian.org/debian-security $SUITE-security main"
)
# What a node needs: systemd as init (+ D-Bus for the systemd cgroup driver), the runtime, the
# tools kubeadm's preflight and kube-proxy call, and what kind itself runs in nodes.
PACKAGES=(
	systemd systemd-sysv dbus
	containerd runc containernetworking-plugins
	iptables nftables iproute2 conntrack ethtool socat ebtables kmod
	util-linux mount procps ca-certificates libseccomp2 bash
)

log() { printf '[node-image] %s\n' "$*" >&2; }

# base_root: prints the path of the cached tarball of the Debian root, making it when missing.
base_root() {
	local args=(--mode=root --variant=minbase --format=tar --aptopt='Apt::Install-Recommends "false"'
		--include="$(
			IFS=,
			echo "${PACKAGES[*]}"
		)")
	local key tar
	key="$(printf '%s\n' "${args[@]}" "$SUITE" "${MIRRORS[@]}" | sha256sum | cut -c1-16)"
	tar="$NODE_CACHE/base-$key.tar"
	if [[ -s "$tar" ]]; then
		log "Debian root: cached $tar"
		printf '%s\n' "$tar"
		return
	fi
	command -v mmdebstrap >/dev/null || krs_die "mmdebstrap missing: apt-get install mmdebstrap"
	log "Debian root: mmdebstrap $SUITE (${#PACKAGES[@]} packages) -> $tar"
	mmdebstrap "${args[@]}" "$SUITE" "$tar.tmp" "${MIRRORS[@]}" >&2 || {
		rm -f "$tar.tmp"
		krs_die "mmdebstrap failed"
	}
	mv "$tar.tmp" "$tar"
	find "$NODE_CACHE" -maxdepth 1 -name 'base-????????????????.tar' ! -name "$(basename "$tar")" -delete
	printf '%s\n' "$tar"
}

# upstream_bins: kubeadm and kubectl v1.20.2 (and the control-plane binaries images.sh packs;
# hack/upstream/targets: node-image), built from Debian's kubernetes source package when missing
# (10-15 min when cold).
upstream_bins() {
	krs_upstream_ensure node-image
}

our_kubelet() {
	if [[ -n "${KRS_KUBELET:-}" ]]; then
		[[ -x "$KRS_KUBELET" ]] || krs_die "KRS_KUBELET=$KRS_KUBELET is not an executable"
		printf '%s\n' "$KRS_KUBELET"
		return
	fi
	# Always asked (a no-op when up to date): a binary left from an older checkout must not ship.
	log "cargo build --release --bin kubelet"
	(cd "$REPO" && cargo build --release --locked --bin kubelet >&2)
	printf '%s\n' "${CARGO_TARGET_DIR:-$REPO/target}/release/kubelet"
}

# kind's changes to a Debian root: only containerd and the kubelet start (no gettys, udev,
# tmpfiles clean-up of the node's own files at boot), journald does not read the kernel's log.
systemd_like_kind() {
	local root="$1"
	rm -f "$root"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service \
		"$root"/lib/systemd/system/multi-user.target.wants/* \
		"$root"/etc/systemd/system/*.wants/* \
		"$root"/lib/systemd/system/local-fs.target.wants/* \
		"$root"/lib/systemd/system/sockets.target.wants/*udev* \
		"$root"/lib/systemd/system/sockets.target.wants/*initctl* \
		"$root"/lib/systemd/system/basic.target.wants/*
	mkdir -p "$root/etc/systemd/journald.conf.d"
	printf '[Journal]\nReadKMsg=no\n' >"$root/etc/systemd/journald.conf.d/10-kind.conf"
	ln -sfn /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
	mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
	ln -sfn /etc/systemd/system/containerd.service "$root/etc/systemd/system/multi-user.target.wants/containerd.service"
	ln -sfn /etc/systemd/system/kubelet.service "$root/etc/systemd/system/multi-user.target.wants/kubelet.service"
	ln -sfn /etc/systemd/system/kubelet-rs-cgroups.service \
		"$root/etc/systemd/system/multi-user.target.wants/kubelet-rs-cgroups.service"
	[[ -e "$root/sbin/init" ]] || krs_die "no /sbin/init in the root (systemd-sysv)"
}

# preload ROOT LIST: imports the control-plane images named in LIST ("TAR NAME..." lines from
# e2e/kubeadm/images.sh) into ROOT's own containerd store, unpacked for overlayfs, as kind's
# node image build does; a containerd of our own, pointed at ROOT/var/lib/containerd, without CRI.
preload() {
	local root="$1" list="$2" state tar names name pid ok=0
	state="$(mktemp -d /run/krs-node-image.XXXXXX)"
	cat >"$state/config.toml" <<-EOF
		version = 2
		root = "$root/var/lib/containerd"
		state = "$state/state"
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "$state/containerd.sock"
		[ttrpc]
		  address = "$state/containerd.sock.ttrpc"
		[debug]
		  address = ""
		[metrics]
		  address = ""
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$state/opt"
	EOF
	containerd --config "$state/config.toml" >"$state/containerd.log" 2>&1 &
	pid=$!
	local c=(timeout 300 ctr --address "$state/containerd.sock" -n k8s.io)
	for _ in $(seq 100); do
		"${c[@]}" version >/dev/null 2>&1 && ok=1 && break
		sleep 0.1
	done
	local failed=$((1 - ok))
	while ((!failed)) && read -r tar names; do
		[[ "$names" == k8s.gcr.io/* ]] || continue
		log "preloading $names"
		"${c[@]}" images import --all-platforms --snapshotter overlayfs "$tar" >/dev/null || failed=1
		for name in $names; do
			"${c[@]}" images ls -q | grep -xF "$name" >/dev/null || {
				log "error: $name missing after import"
				failed=1
			}
		done
	done <"$list"
	# As containerd's discard_unpacked_layers does for pulls (kind's config sets it): the layers'
	# compressed blobs go once they are unpacked; the snapshots, manifests and configs stay.
	local manifest layer dropped=0
	if ((!failed)); then
		for manifest in $("${c[@]}" images ls | awk 'NR > 1 && $1 ~ /^k8s.gcr.io\// { print $3 }'); do
			for layer in $("${c[@]}" content get "$manifest" |
				python3 -c 'import json,sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))'); do
				"${c[@]}" content rm "$layer" >/dev/null && dropped=$((dropped + 1))
			done
		done
		log "dropped $dropped unpacked layer blobs"
	fi
	"${c[@]}" images ls -q 2>/dev/null | sed 's/^/[node-image]   in the image: /' >&2 || true
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if ((failed)); then
		tail -n 20 "$state/containerd.log" >&2
		rm -rf "$state"
		krs_die "preloading images failed"
	fi
	rm -rf "$state"
	rm -rf "$root/var/lib/containerd/tmpmounts" "$root/var/lib/containerd/io.containerd.content.v1.content/ingest"
}

main() {
	krs_require_root
	[[ $# -eq 0 ]] || {
		sed -n '2p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2
		exit 2
	}
	local t0=$SECONDS base kubelet stage list digest
	mkdir -p "$NODE_CACHE"
	base="$(base_root)"
	upstream_bins
	kubelet="$(our_kubelet)"
	list="$NODE_CACHE/images.list"
	log "control-plane images (e2e/kubeadm/images.sh, cached in $KRS_CACHE_DIR/images)"
	"$REPO/e2e/kubeadm/images.sh" "$list"

	stage="$NODE_CACHE/stage"
	rm -rf "$stage"
	mkdir -p "$stage"
	# shellcheck disable=SC2064 # the path is fixed now
	trap "rm -rf '$stage'" EXIT
	log "unpacking the Debian root"
	tar -C "$stage" --numeric-owner -xpf "$base"
	# The runtime mounts /dev; mmdebstrap's device nodes are not needed.
	find "$stage/dev" -mindepth 1 -delete
	# No documentation, manual pages or translations (the licences stay). dpkg's path-exclude
	# would do it at install time, but makes dpkg fail on some packages' man page folders here.
	find "$stage/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
	find "$stage/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$stage"/usr/share/{man,info,lintian,linda}/* "$stage"/usr/share/locale/*/LC_MESSAGES

	log "kind's files and layout"
	cp -a --no-preserve=ownership "$HERE/files/." "$stage/"
	systemd_like_kind "$stage"
	mkdir -p "$stage/etc/kubernetes/manifests" "$stage/etc/cni/net.d" "$stage/etc/containerd/certs.d" \
		"$stage/var/lib/kubelet"
	printf '%s\n' "$KUBE_VERSION" >"$stage/kind/version"
	log "binaries: kubelet-rs ($("$kubelet" --version)), kubeadm and kubectl $KUBE_VERSION"
	strip --strip-unneeded -o "$stage/usr/bin/kubelet" "$kubelet"
	install -m 0755 "$KRS_UPSTREAM_BIN_DIR/kubeadm" "$stage/usr/bin/kubeadm"
	install -m 0755 "$KRS_UPSTREAM_BIN_DIR/kubectl" "$stage/usr/bin/kubectl"
	chmod 0755 "$stage/usr/bin/kubelet"
	# One identity per node: systemd (the entrypoint) makes it at boot.
	: >"$stage/etc/machine-id"
	rm -f "$stage/var/lib/dbus/machine-id" "$stage/etc/hostname"
	: >"$stage/etc/resolv.conf"
	rm -rf "$stage"/var/cache/apt/* "$stage"/var/lib/apt/lists/* "$stage"/var/log/*.log \
		"$stage"/var/log/apt/* "$stage"/tmp/* "$stage"/var/cache/debconf/*-old

	preload "$stage" "$list"

	log "writing the OCI layout (images/node/oci_node.py)"
	digest="$(python3 "$HERE/oci_node.py" --root "$stage" --out "$OUT" --name "$IMAGE_NAME" \
		--arch "$(krs_host_arch)" \
		--entrypoint '["/usr/local/bin/entrypoint","/sbin/init"]' \
		--env container=docker --stop-signal 'SIGRTMIN+3' \
		--label "org.opencontainers.image.title=kind node image with kubelet-rs" \
		--label "dev.kubelet-rs.kubelet=$("$kubelet" --version | awk '{print $2}')")"
	printf '%s\n' "$IMAGE_NAME" >"$OUT.name"
	printf '%s\n' "$digest" >"$OUT.digest"
	rm -rf "$stage"
	trap - EXIT
	log "done in $((SECONDS - t0))s"
	printf 'image:  %s\n' "$IMAGE_NAME"
	printf 'path:   %s\n' "$OUT"
	printf 'digest: %s\n' "$digest"
	printf 'size:   %s bytes (%s)\n' "$(stat -c %s "$OUT")" "$(du -h --apparent-size "$OUT" | cut -f1)"
}

if [[ "${1:-}" == --base-only ]]; then
	krs_require_root
	mkdir -p "$NODE_CACHE"
	base_root
	exit 0
fi
main "$@"
