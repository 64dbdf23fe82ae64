#!/usr/bin/env bash
# Usage: charts/kubelet-rs/test/run.sh [--skip-image] [--skip-installer]   (as root)
#
# Checks the kubelet-rs Helm chart, its installer script and its installer image:
#   1. shellcheck of the chart's scripts (when shellcheck is installed);
#   2. chart_test.py: `helm lint --strict` and rendering with the default and non-default values
#      through PyPI's helm-python-sdk (Helm 4's SDK; a venv in /var/cache/kubelet-rs/chart/venv),
#      asserting the rendered objects' key facts and that bad values are refused;
#   3. api_test.py, when the test control plane (hack/cluster) is up: the chart's RBAC objects
#      applied to the real kube-apiserver in namespace krs-chart-test, and the installer's API
#      side (the Lease lock, Node marks, the pre-delete wait) with their token (deleted after);
#   4. installer_test.py: installer.sh run by busybox sh against host folders, with a real
#      systemd (hack/testbed/systemd-node.sh) running kubelet.service and kubeadm's drop-in:
#      install, rollback on healthz / Ready failure, the Lease lock, uninstall and the
#      pre-delete hook's flow (stand-ins: the kubelets and the apiserver, see its header);
#   5. image_check.py: builds the installer image (installer/build-image.sh) and checks the OCI
#      tarball, then runs its tools and the kubelet chrooted in its unpacked root.
# KRS_CHART_KUBELET=PATH ships that kubelet in the image instead of building a release one.
# Exits non-zero when any check fails. Scratch folders go under /var/cache/kubelet-rs/chart and
# are removed afterwards.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHART="$(cd "$HERE/.." && pwd)"
REPO="$(cd "$CHART/../.." && pwd)"
# shellcheck source=hack/testbed/lib.sh
source "$REPO/hack/testbed/lib.sh"
CACHE="$KRS_CACHE_DIR/chart"
VENV="$CACHE/venv"
HELM_SDK_VERSION=0.2.2
SKIP_IMAGE=0
SKIP_INSTALLER=0

log() { printf '[chart-test] %s\n' "$*" >&2; }

while [[ $# -gt 0 ]]; do
	case "$1" in
	--skip-image) SKIP_IMAGE=1 ;;
	--skip-installer) SKIP_INSTALLER=1 ;;
	-h | --help) sed -n '2,20p' "$0" && exit 0 ;;
	*) krs_die "unknown argument $1 (see --help)" ;;
	esac
	shift
done
krs_require_root
mkdir -p "$CACHE"
started=$SECONDS

if command -v shellcheck >/dev/null; then
	shellcheck -s sh "$CHART/installer/installer.sh"
	(cd "$REPO" && shellcheck -x charts/kubelet-rs/installer/build-image.sh charts/kubelet-rs/test/run.sh)
	log "ok: shellcheck clean (installer.sh as POSIX sh, build-image.sh, run.sh)"
else
	log "shellcheck not installed: skipped"
fi

if ! "$VENV/bin/python" -c 'import helm_python, yaml' 2>/dev/null; then
	log "creating $VENV with helm-python-sdk $HELM_SDK_VERSION"
	rm -rf "$VENV"
	python3 -m venv "$VENV"
	"$VENV/bin/pip" install -q "helm-python-sdk==$HELM_SDK_VERSION" pyyaml
fi
log "== chart: lint and render (helm-python-sdk)"
"$VENV/bin/python" "$HERE/chart_test.py" "$CHART"

log "== the installer's API side on the real apiserver, with the chart's RBAC"
rc=0
"$VENV/bin/python" "$HERE/api_test.py" "$CHART" "$CACHE/api-test" || rc=$?
if ((rc == 3)); then
	log "skipped: the test control plane is not up (hack/cluster/up.sh)"
elif ((rc != 0)); then
	krs_die "api_test.py failed"
fi

if ((!SKIP_INSTALLER)); then
	log "== installer.sh against host folders, real systemd"
	for tool in busybox curl jq; do command -v "$tool" >/dev/null || krs_die "$tool is missing"; done
	python3 "$HERE/installer_test.py" "$CACHE/installer-test"
fi

if ((!SKIP_IMAGE)); then
	log "== installer image"
	tar="$("$CHART/installer/build-image.sh")"
	kubelet="${KRS_CHART_KUBELET:-${CARGO_TARGET_DIR:-$KRS_CACHE_DIR/target}/release/kubelet}"
	python3 "$HERE/image_check.py" "$tar" "$kubelet" "$CACHE/image-root"
	log "image: $tar, $(du -h "$tar" | cut -f1), manifest $(cat "$tar.digest")"
fi
log "PASS: every check ($((SECONDS - started))s)"
