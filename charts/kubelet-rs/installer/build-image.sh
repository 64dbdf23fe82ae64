#!/usr/bin/env bash
# Usage: charts/kubelet-rs/installer/build-image.sh [--kubelet PATH] [--out FILE.tar]
#
# Builds the kubelet-rs chart's installer image as an OCI image tarball, without docker or a
# registry (hack/testbed/oci_image.py): busybox-static (sh, nsenter, sha256sum, ...), curl and
# jq with the shared objects they load (from this machine, hack/testbed/image_lib.sh), our
# kubelet at /opt/kubelet-rs/kubelet (debug info stripped, with its shared objects) and
# installer.sh at /opt/kubelet-rs/installer.sh. The image is named
# localhost/kubelet-rs-installer:<chart version>, the chart's default image.
#
#   --kubelet PATH  the kubelet to ship (default, or with KRS_CHART_KUBELET unset: this checkout's,
#                   `cargo build --release --bin kubelet`, a no-op when it is up to date)
#   --out FILE.tar  where to write it (default /var/cache/kubelet-rs/chart/kubelet-rs-installer-<version>.tar)
#
# Prints the tarball's path; its manifest digest is in FILE.tar.digest. Load it with
# `ctr -n k8s.io images import FILE.tar` on each node, or `kind load image-archive FILE.tar`.
# Needs: busybox-static, curl, jq, binutils (objcopy), python3.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
# shellcheck source=hack/testbed/lib.sh
source "$REPO/hack/testbed/lib.sh"
# shellcheck source=hack/testbed/image_lib.sh
source "$REPO/hack/testbed/image_lib.sh"

log() { printf '[chart-image] %s\n' "$*" >&2; }

CHART_VERSION="$(awk '$1 == "version:" { print $2 }' "$REPO/charts/kubelet-rs/Chart.yaml")"
[[ -n "$CHART_VERSION" ]] || krs_die "no version in charts/kubelet-rs/Chart.yaml"
IMAGE="localhost/kubelet-rs-installer:$CHART_VERSION"
TARGET_DIR="${CARGO_TARGET_DIR:-$KRS_CACHE_DIR/target}"
KUBELET="${KRS_CHART_KUBELET:-}"
OUT="$KRS_CACHE_DIR/chart/kubelet-rs-installer-$CHART_VERSION.tar"

while [[ $# -gt 0 ]]; do
	case "$1" in
	--kubelet) KUBELET="$2" && shift 2 ;;
	--out) OUT="$2" && shift 2 ;;
	-h | --help) sed -n '2,17p' "$0" && exit 0 ;;
	*) krs_die "unknown argument $1 (see --help)" ;;
	esac
done

for tool in busybox curl jq objcopy python3; do
	command -v "$tool" >/dev/null || krs_die "$tool is missing (apt-get install busybox-static curl jq binutils python3)"
done
busybox --list | grep -x nsenter >/dev/null || krs_die "this busybox has no nsenter applet (Debian's busybox-static has)"
if [[ -z "$KUBELET" ]]; then
	# Always asked: a release binary left from an older checkout must not be shipped.
	log "building the kubelet (cargo build --release --bin kubelet)"
	(cd "$REPO" && CARGO_TARGET_DIR="$TARGET_DIR" cargo build --release --locked --bin kubelet >&2)
	KUBELET="$TARGET_DIR/release/kubelet"
fi
[[ -x "$KUBELET" ]] || krs_die "no kubelet binary at $KUBELET"
VERSION="$("$KUBELET" --version)"

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/kubelet-rs-installer.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
stage_busybox "$STAGE"
copy_host_binary "$STAGE" "$(command -v curl)" /usr/bin/curl
copy_host_binary "$STAGE" "$(command -v jq)" /usr/bin/jq
copy_host_binary "$STAGE" "$KUBELET" /opt/kubelet-rs/kubelet
objcopy --strip-debug "$STAGE/opt/kubelet-rs/kubelet"
install -m 0755 "$HERE/installer.sh" "$STAGE/opt/kubelet-rs/installer.sh"

mkdir -p "$(dirname "$OUT")"
log "writing $IMAGE ($VERSION) to $OUT"
python3 "$REPO/hack/testbed/oci_image.py" --root "$STAGE" --out "$OUT" --arch "$(krs_host_arch)" \
	--name "$IMAGE" --entrypoint '["/bin/sh", "/opt/kubelet-rs/installer.sh"]' --cmd '["run"]' \
	>"$OUT.digest.tmp"
mv "$OUT.digest.tmp" "$OUT.digest"
log "done: $(du -h "$OUT" | cut -f1), manifest $(cat "$OUT.digest")"
printf '%s\n' "$OUT"
