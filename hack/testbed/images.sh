#!/usr/bin/env bash
# Usage: hack/testbed/images.sh [INSTANCE]
#
# Builds the test images (pause, busybox) as OCI tarballs without docker or a registry and
# imports them into the running containerd of INSTANCE (default "krs"), namespace k8s.io.
# Tarballs are cached in /var/cache/kubelet-rs/images/, keyed by their inputs; an image whose
# names all point at the expected digest already is not imported again.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAMESPACE="k8s.io"
IMAGE_CACHE="$KRS_CACHE_DIR/images"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PAUSE_NAMES=(
	"$KRS_SANDBOX_IMAGE"
	registry.k8s.io/pause:3.9
	registry.k8s.io/pause:3.6
	k8s.gcr.io/pause:3.2
)
BUSYBOX_NAMES=(
	docker.io/library/busybox:latest
	docker.io/library/busybox:1.36
	docker.io/library/busybox:1.35
	docker.io/library/busybox:1.29
	registry.k8s.io/e2e-test-images/busybox:1.29-4
	registry.k8s.io/e2e-test-images/busybox:1.36.1-1
	registry.k8s.io/e2e-test-images/busybox:1.37.0-1
)

usage() { echo "usage: $0 [INSTANCE]" >&2; }

ctr_() { timeout 120 ctr --address "$KRS_I_SOCK" -n "$NAMESPACE" "$@"; }

sha256_of() { sha256sum "$@" | cut -d' ' -f1; }

# Root folder of the pause image: the static binary alone.
stage_pause() {
	local stage="$1" bin="$2"
	install -m 0755 "$bin" "$stage/pause"
}

# Root folder of the busybox image: busybox, a link per applet in /bin, root and nobody.
stage_busybox() {
	local stage="$1" applet
	mkdir -p "$stage"/{bin,dev,etc,home,proc,root,sys,tmp,usr,var}
	chmod 0755 "$stage"/{bin,dev,etc,home,proc,sys,usr,var}
	chmod 0700 "$stage/root"
	chmod 1777 "$stage/tmp"
	install -m 0755 /bin/busybox "$stage/bin/busybox"
	while read -r applet; do
		[[ -n "$applet" && "$applet" != busybox && ! -e "$stage/bin/$applet" ]] || continue
		ln -s busybox "$stage/bin/$applet"
	done < <(/bin/busybox --list)
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/home:/bin/false' \
		>"$stage/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$stage/etc/group"
	chmod 0644 "$stage/etc/passwd" "$stage/etc/group"
}

# build_cached NAME KEY STAGE_FN STAGE_ARG OCI_ARGS...: prints the cached tarball's path,
# building it first when no tarball exists for KEY.
build_cached() {
	local name="$1" key="$2" stage_fn="$3" stage_arg="$4"
	shift 4
	local tar="$IMAGE_CACHE/$name-${key:0:16}.tar"
	if [[ -s "$tar" && -s "$tar.digest" ]]; then
		printf '%s\n' "$tar"
		return 0
	fi
	krs_log "building image $name"
	mkdir -p "$IMAGE_CACHE"
	local stage
	stage="$(mktemp -d)"
	# shellcheck disable=SC2064 # expand now: the trap must remove this very folder
	trap "rm -rf '$stage'; trap - RETURN" RETURN
	"$stage_fn" "$stage" "$stage_arg"
	python3 "$HERE/oci_image.py" --root "$stage" --out "$tar" --arch "$(krs_host_arch)" "$@" \
		>"$tar.digest.tmp"
	mv "$tar.digest.tmp" "$tar.digest"
	# Older builds of this image are dead weight now.
	find "$IMAGE_CACHE" -maxdepth 1 -name "$name-*.tar*" ! -name "$(basename "$tar")*" -delete
	printf '%s\n' "$tar"
}

# Succeeds when every NAME exists in containerd and points at DIGEST.
all_present() {
	local digest="$1" listing name
	shift
	listing="$(ctr_ images ls 2>/dev/null | awk 'NR > 1 { print $1, $3 }')"
	for name in "$@"; do
		grep -qxF "$name $digest" <<<"$listing" || return 1
	done
}

# import_image TAR NAMES...: imports unless already there, then checks every name.
import_image() {
	local tar="$1" digest
	shift
	digest="$(<"$tar.digest")"
	if all_present "$digest" "$@"; then
		krs_log "present: $* ($digest)"
		return 0
	fi
	krs_log "importing $(basename "$tar")"
	ctr_ images import --all-platforms "$tar" >/dev/null
	all_present "$digest" "$@" || krs_die "after import, not every name of $tar points at $digest"
	krs_log "imported: $* ($digest)"
}

name_args() {
	local name
	for name in "$@"; do printf -- '--name\n%s\n' "$name"; done
}

main() {
	if [[ $# -gt 1 ]]; then
		usage
		exit 2
	fi
	krs_require_root
	krs_instance_vars "${1:-$KRS_DEFAULT_INSTANCE}"
	krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG" >/dev/null ||
		krs_die "containerd $KRS_I_NAME is not running: hack/testbed/containerd.sh start $KRS_I_NAME"
	[[ -x /bin/busybox ]] || krs_die "/bin/busybox missing: run hack/testbed/install.sh"

	local recipe pause_bin key tar args=()
	# The recipe: any change to how images are made invalidates every cached tarball.
	recipe="$(cat "$HERE/oci_image.py" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"

	pause_bin="$("$HERE/build-pause.sh")"
	key="$(printf '%s %s\n' "$recipe" "$(sha256_of "$pause_bin")" | sha256sum | cut -d' ' -f1)"
	mapfile -t args < <(name_args "${PAUSE_NAMES[@]}")
	tar="$(build_cached pause "$key" stage_pause "$pause_bin" \
		--entrypoint '["/pause"]' "${args[@]}")"
	import_image "$tar" "${PAUSE_NAMES[@]}"

	key="$(printf '%s %s\n' "$recipe" "$(sha256_of /bin/busybox)" | sha256sum | cut -d' ' -f1)"
	mapfile -t args < <(name_args "${BUSYBOX_NAMES[@]}")
	tar="$(build_cached busybox "$key" stage_busybox "" --cmd '["sh"]' "${args[@]}")"
	import_image "$tar" "${BUSYBOX_NAMES[@]}"
}

main "$@"
