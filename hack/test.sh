#!/usr/bin/env bash
# Usage: hack/test.sh [EXTRA CARGO TEST ARGS...]
#
# The project's test command (README and .ci/run call it). Installs and starts the test bed
# (containerd instance "krs", or $KRS_INSTANCE, with the test images imported), exports its
# environment (KRS_CONTAINERD_SOCK, CONTAINER_RUNTIME_ENDPOINT, ...), then runs cargo fmt --check,
# clippy with -D warnings and cargo test --all-targets with the extra arguments.
# CARGO_TARGET_DIR defaults to /var/cache/kubelet-rs/target (outside the checkout).
# containerd is stopped at the end unless KRS_KEEP_CONTAINERD=1 or it was running already.
# Exit status: the first failing step's, else cargo test's.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBED="$REPO_ROOT/hack/testbed"
INSTANCE="${KRS_INSTANCE:-krs}"

log() { printf '[test] %s\n' "$*" >&2; }

stop_bed() {
	"$TESTBED/containerd.sh" stop "$INSTANCE" || log "warning: stopping containerd failed"
}

main() {
	if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
		echo "usage: $0 [EXTRA CARGO TEST ARGS...]" >&2
		exit 0
	fi
	cd "$REPO_ROOT"

	"$TESTBED/install.sh"
	"$TESTBED/build-pause.sh" >/dev/null
	if "$TESTBED/containerd.sh" status "$INSTANCE" >/dev/null; then
		log "containerd $INSTANCE was running already: it stays running"
	elif [[ "${KRS_KEEP_CONTAINERD:-0}" != 1 ]]; then
		trap stop_bed EXIT
	fi
	"$TESTBED/containerd.sh" start "$INSTANCE" >/dev/null
	"$TESTBED/images.sh" "$INSTANCE"
	eval "$("$TESTBED/containerd.sh" env "$INSTANCE")"

	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
	log "test bed: $KRS_CONTAINERD_SOCK; CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

	log "cargo fmt --check"
	cargo fmt --all -- --check
	log "cargo clippy"
	cargo clippy --all-targets -- -D warnings
	log "cargo test"
	local status=0
	cargo test --all-targets "$@" || status=$?
	return "$status"
}

main "$@"
