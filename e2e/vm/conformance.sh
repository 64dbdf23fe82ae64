#!/usr/bin/env bash
# Usage: e2e/vm/conformance.sh --kubelet ours|upstream [--suite bookworm|trixie]
#                              [--parallel N] [--focus REGEX] [--keep]
#        (e2e/vm/run.sh conformance; as root)
#
# The upstream node conformance suite against a cgroup v2 node: e2e/run.sh --suite
# node-conformance, the harness as it runs on this machine, run inside one VM of the bed (systemd
# as PID 1, cgroup v2 only), so that the node it sets up, its containerd and the kubelet under
# test all live on cgroup v2. In order:
#   1. on the machine: the kubelet (ours: cargo build --release; upstream's: hack/upstream), the
#      upstream binaries the harness runs (uses cluster, e2e, e2e-images, upstream, tests) and
#      every test image's tarball (e2e/images.sh --tarballs: the VM has no cargo, and not the
#      packages the images copy from the machine);
#   2. one VM (e2e/vm/run.sh up, 8192 MiB) that mounts the checkout, the target folder and the
#      cache read-only at the machine's paths, and e2e/results/ read-write;
#   3. in the VM: e2e/run.sh --kubelet KUBELET --suite node-conformance --results-as
#      node-conformance-cgroupv2 (--focus: --suite focus:REGEX, results not kept), the images
#      imported from the tarballs (KRS_PREBUILT_IMAGES). Its results go to
#      e2e/results/node-conformance-cgroupv2/KUBELET/ and e2e/compare.sh merges them, as for
#      the machine's runs; the artifacts stay in /var/tmp/kubelet-rs-vm-e2e/KUBELET.
# The VM goes at the end unless --keep. Exits with e2e/run.sh's status.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"

MEMORY=8192
RESULTS_AS=node-conformance-cgroupv2
ARTIFACTS_ROOT=/var/tmp/kubelet-rs-vm-e2e

usage() { sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

main() {
	local kubelet="" suite=bookworm parallel=4 focus="" keep=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kubelet) kubelet="${2:?--kubelet takes ours or upstream}"; shift 2 ;;
		--suite) suite="${2:?--suite takes a value}"; shift 2 ;;
		--parallel) parallel="${2:?--parallel takes a number}"; shift 2 ;;
		--focus) focus="${2:?--focus takes a regular expression}"; shift 2 ;;
		--keep) keep=1; shift ;;
		*) usage; exit 2 ;;
		esac
	done
	[[ "$kubelet" == ours || "$kubelet" == upstream ]] || { usage; exit 2; }
	vm_require_root
	vm_build_begin

	local t0=$SECONDS bin="$CARGO_TARGET_DIR/release/kubelet"
	vm_log "building what the VM runs"
	krs_upstream_ensure cluster e2e e2e-images upstream tests
	# Ours is the kubelet under test, or with --kubelet upstream the one the VM's package holds.
	(cd "$VM_REPO" && cargo build --release --bin kubelet) >&2
	"$VM_REPO/e2e/images.sh" --tarballs "$VM_BUILT_LIST" 2>/dev/null
	vm_log "built in $((SECONDS - t0)) s ($(wc -l <"$VM_BUILT_LIST") image tarballs)"

	local artifacts="$ARTIFACTS_ROOT/$kubelet"
	rm -rf "$artifacts"
	mkdir -p "$ARTIFACTS_ROOT" "$VM_REPO/e2e/results"
	export KRS_DEB_KUBELET="${KRS_DEB_KUBELET:-$bin}"
	# The parent is shared: e2e/run.sh empties its artifacts folder by removing it.
	vm_up_built "$suite" "$MEMORY" "$keep" \
		--share-rw "$VM_REPO/e2e/results" --share-rw "$ARTIFACTS_ROOT"
	# The VM's own kubelet service would run pods beside the harness's node: it stays off.
	vm_ssh 1 'systemctl disable --now kubelet.service >/dev/null 2>&1 || true' </dev/null

	local args=(--kubelet "$kubelet" --parallel "$parallel" --artifacts "$artifacts")
	if [[ -n "$focus" ]]; then
		args+=(--suite "focus:$focus")
	else
		args+=(--suite node-conformance --results-as "$RESULTS_AS")
	fi
	local env quoted status=0 t1=$SECONDS
	env="$(vm_built_env)"
	[[ "$kubelet" != ours ]] || env+=$'\n'"$(printf 'export KRS_E2E_KUBELET=%q' "$bin")"
	printf -v quoted '%q ' "$VM_REPO/e2e/run.sh" "${args[@]}"
	vm_log "in vm1: e2e/run.sh ${args[*]}"
	vm_ssh 1 "$env"$'\n'"$quoted" </dev/null || status=$?
	vm_log "e2e/run.sh in the VM ended with status $status after $((SECONDS - t1)) s"
	[[ -z "$focus" ]] || return "$status"
	[[ -s "$VM_REPO/e2e/results/$RESULTS_AS/$kubelet/summary.md" ]] &&
		cat "$VM_REPO/e2e/results/$RESULTS_AS/$kubelet/summary.md"
	return "$status"
}

main "$@"
