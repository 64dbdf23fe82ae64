#!/usr/bin/env bash
# Usage: hack/testbed/images.sh [INSTANCE]
#        hack/testbed/images.sh --list FILE
#
# Builds the test images (pause, busybox) as OCI tarballs without docker or a registry and
# imports them into the running containerd of INSTANCE (default "krs"), namespace k8s.io.
# With --list, imports nothing and writes FILE instead: one line per tarball, "TAR NAME..."
# (e2e/vm/run.sh imports them into its VMs). With KRS_PREBUILT_IMAGES=FILE, builds nothing and
# imports every tarball such a FILE lists (image_lib.sh).
# Tarballs are cached in /var/cache/kubelet-rs/images/, keyed by their inputs; an image whose
# names all point at the expected digest already is not imported again.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# shellcheck source=hack/testbed/image_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/image_lib.sh"

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
	# test/e2e_node/mirror_pod_grace_period_test.go
	docker.io/library/busybox:1.31.1
	registry.k8s.io/e2e-test-images/busybox:1.29-4
	registry.k8s.io/e2e-test-images/busybox:1.36.1-1
	registry.k8s.io/e2e-test-images/busybox:1.37.0-1
)

usage() { echo "usage: $0 [INSTANCE] | --list FILE" >&2; }

# Root folder of the pause image: the static binary alone.
stage_pause() {
	local stage="$1" bin="$2"
	install -m 0755 "$bin" "$stage/pause"
}

main() {
	if [[ "${1:-}" == --list ]]; then
		[[ $# -eq 2 ]] || {
			usage
			exit 2
		}
		: >"$2"
		export KRS_IMAGE_LIST_OUT="$2"
	elif [[ $# -gt 1 ]]; then
		usage
		exit 2
	fi
	krs_require_root
	if [[ -z "${KRS_IMAGE_LIST_OUT:-}" ]] && imported_prebuilt_into "${1:-$KRS_DEFAULT_INSTANCE}"; then
		return 0
	fi
	[[ -x /bin/busybox ]] || krs_die "/bin/busybox missing: run hack/testbed/install.sh"

	local recipe pause_bin key tar args=()
	# The recipe: any change to how images are made invalidates every cached tarball.
	recipe="$(krs_image_recipe "${BASH_SOURCE[0]}")"

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
