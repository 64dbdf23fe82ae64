#!/usr/bin/env bash
# Usage: e2e/kubeadm/images.sh LIST_FILE      (run by e2e/kubeadm/run.sh, on the machine)
#
# Builds, as OCI tarballs (hack/testbed/oci_image.py: no docker, no registry), the images
# `kubeadm config images list --kubernetes-version v1.20.2` names, under exactly those names, plus
# the busybox the test Deployment runs, and writes LIST_FILE: one line per tarball, "TAR NAME...".
# e2e/kubeadm/node.sh imports them into the node's containerd (`ctr -n k8s.io images import`):
# the node has no registry, and a pull of anything else fails at once (closed local port).
#
#   k8s.gcr.io/kube-apiserver:v1.20.2            the tree's binaries (hack/upstream/build.sh, static),
#   k8s.gcr.io/kube-controller-manager:v1.20.2   in /usr/local/bin as upstream's images have them
#   k8s.gcr.io/kube-scheduler:v1.20.2            (kubeadm's manifests call them by name), on busybox
#   k8s.gcr.io/kube-proxy:v1.20.2                the same, plus this machine's iptables (nf_tables
#                                                backend, as the machine's rules), its extensions and
#                                                conntrack, with their shared objects
#   k8s.gcr.io/etcd:3.4.13-0                     Debian's etcd-server (3.4) as /usr/local/bin/etcd
#   k8s.gcr.io/pause:3.2                         the project's pause (images/pause, static)
#   docker.io/library/busybox:1.36               busybox-static (the test Deployment)
# k8s.gcr.io/coredns:1.7.0 is not built: no registry reachable here serves CoreDNS (neither a
# Debian package nor a crate or wheel), so run.sh skips kubeadm's addon/coredns phase.
# Tarballs are cached in /var/cache/kubelet-rs/images/ (names starting with kubeadm-), keyed by
# their inputs and by this recipe.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTBED="$HERE/../../hack/testbed"
# shellcheck source=hack/testbed/lib.sh
source "$TESTBED/lib.sh"
# shellcheck source=hack/testbed/image_lib.sh
source "$TESTBED/image_lib.sh"

KUBE_VERSION="v1.20.2"
# shellcheck source=hack/upstream/lib.sh
source "$HERE/../../hack/upstream/lib.sh"
XTABLES_MULTI=/usr/sbin/xtables-nft-multi
XTABLES_LIBDIR="/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)/xtables"

stage_component() {
	stage_busybox "$1"
	install -D -m 0755 "$(krs_upstream_bin "$2")" "$1/usr/local/bin/$2"
}

# kube-proxy (iptables mode) runs iptables, iptables-save and iptables-restore (and the ip6tables
# ones) itself; the extensions are loaded with dlopen, so ldd does not name them.
stage_kube_proxy() {
	local stage="$1" tool ext
	stage_component "$stage" kube-proxy
	copy_host_binary "$stage" "$XTABLES_MULTI" /usr/sbin/xtables-nft-multi
	for tool in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -sfn xtables-nft-multi "$stage/usr/sbin/$tool"
	done
	for ext in "$XTABLES_LIBDIR"/*.so; do
		copy_host_binary "$stage" "$ext" "$ext"
	done
	copy_host_binary "$stage" "$(command -v conntrack)" /usr/sbin/conntrack
}

stage_etcd() {
	stage_busybox "$1"
	copy_host_binary "$1" "$(command -v etcd)" /usr/local/bin/etcd
}

stage_pause() {
	install -m 0755 "$2" "$1/pause"
}

# image LIST_FILE NAME KEY_INPUTS STAGE_FN STAGE_ARG OCI_ARGS... -- REFS...
make_image() {
	local list="$1" name="$2" stage_fn="$3" stage_arg="$4"
	shift 4
	local oci_args=() refs=() inputs=() key tar args=() f
	while [[ "$1" != -- ]]; do
		oci_args+=("$1")
		shift
	done
	shift
	while [[ "$1" != -- ]]; do
		refs+=("$1")
		shift
	done
	shift
	inputs=("$@")
	key="$({
		printf '%s %s\n' "$RECIPE" "$name"
		for f in "${inputs[@]}"; do printf '%s %s\n' "$f" "$(sha256_of "$f")"; done
	} | sha256sum | cut -d' ' -f1)"
	mapfile -t args < <(name_args "${refs[@]}")
	tar="$(build_cached "kubeadm-$name" "$key" "$stage_fn" "$stage_arg" "${oci_args[@]}" "${args[@]}")"
	# build_cached runs in a command substitution, where a failed step does not stop it.
	[[ -s "$tar" && -s "$tar.digest" ]] || {
		rm -f "$tar" "$tar.digest"
		krs_die "building image $name failed"
	}
	printf '%s %s\n' "$tar" "${refs[*]}" >>"$list"
}

main() {
	[[ $# -eq 1 ]] || {
		sed -n '2p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2
		exit 2
	}
	local list="$1" c bin pause_bin inputs=()
	krs_require_root
	[[ -x /bin/busybox ]] || krs_die "/bin/busybox missing: run hack/testbed/install.sh"
	[[ -x "$XTABLES_MULTI" ]] || krs_die "$XTABLES_MULTI missing (Debian's iptables)"
	command -v etcd >/dev/null || krs_die "etcd missing (Debian's etcd-server)"
	command -v conntrack >/dev/null || krs_die "conntrack missing (Debian's conntrack)"
	RECIPE="$(krs_image_recipe "${BASH_SOURCE[0]}")"
	: >"$list.tmp"
	for c in kube-apiserver kube-controller-manager kube-scheduler; do
		bin="$(krs_upstream_bin "$c")"
		make_image "$list.tmp" "$c" stage_component "$c" -- "k8s.gcr.io/$c:$KUBE_VERSION" -- \
			/bin/busybox "$bin"
	done
	bin="$(krs_upstream_bin kube-proxy)"
	mapfile -t inputs < <(closure /bin/busybox "$bin" "$XTABLES_MULTI" \
		"$(command -v conntrack)" "$XTABLES_LIBDIR"/*.so)
	make_image "$list.tmp" kube-proxy stage_kube_proxy "" -- "k8s.gcr.io/kube-proxy:$KUBE_VERSION" -- \
		"${inputs[@]}"
	mapfile -t inputs < <(closure /bin/busybox "$(command -v etcd)")
	make_image "$list.tmp" etcd stage_etcd "" -- k8s.gcr.io/etcd:3.4.13-0 -- "${inputs[@]}"
	pause_bin="$("$TESTBED/build-pause.sh")"
	make_image "$list.tmp" pause stage_pause "$pause_bin" --entrypoint '["/pause"]' -- \
		k8s.gcr.io/pause:3.2 -- "$pause_bin"
	make_image "$list.tmp" busybox stage_busybox "" --cmd '["sh"]' -- \
		docker.io/library/busybox:1.36 -- /bin/busybox
	mv -f "$list.tmp" "$list"
}

main "$@"
