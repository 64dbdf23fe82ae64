#!/usr/bin/env bash
# Usage: hack/testbed/build-pause.sh
#
# Builds images/pause as a static binary (target dir /var/cache/kubelet-rs/images-target, outside
# the checkout) and prints the binary's path on stdout. Fast when nothing changed.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { echo "usage: $0" >&2; }

main() {
	if [[ $# -gt 0 ]]; then
		usage
		exit 2
	fi
	local target target_dir="$KRS_CACHE_DIR/images-target"
	target="$(krs_rust_target)"
	krs_log "building pause ($target)"
	# The image holds nothing but this file, so it must not need a dynamic loader.
	(
		cd "$KRS_REPO_ROOT/images/pause"
		RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --quiet \
			--target "$target" --target-dir "$target_dir"
	) >&2
	local bin="$target_dir/$target/release/pause"
	[[ -x "$bin" ]] || krs_die "pause binary missing at $bin"
	printf '%s\n' "$bin"
}

main "$@"
