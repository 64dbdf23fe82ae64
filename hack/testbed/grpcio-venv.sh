#!/usr/bin/env bash
# Usage: hack/testbed/grpcio-venv.sh
#
# Makes (once) a Python virtual environment with grpcio and grpcio-tools from PyPI under
# $KRS_CACHE_DIR/grpcio-venv, for tests that call the kubelet's gRPC sockets from a client of
# another stack (grpc C-core), and prints the path of its python.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Pinned together: grpcio-tools' generated code needs the protobuf it was released with.
PACKAGES=(grpcio==1.85.1 grpcio-tools==1.85.1)
VENV="$KRS_CACHE_DIR/grpcio-venv"
STAMP="$VENV/.krs-packages"

main() {
	if [[ $# -gt 0 ]]; then
		echo "usage: $0" >&2
		exit 2
	fi
	if [[ -x "$VENV/bin/python" && "$(cat "$STAMP" 2>/dev/null)" == "${PACKAGES[*]}" ]]; then
		echo "$VENV/bin/python"
		return
	fi
	rm -rf "$VENV"
	mkdir -p "$KRS_CACHE_DIR"
	if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
		# Debian's python3 keeps the venv module in a package of its own.
		krs_require_root
		krs_log "installing python3-venv"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
		rm -rf "$VENV"
		python3 -m venv "$VENV"
	fi
	krs_log "installing ${PACKAGES[*]} into $VENV"
	"$VENV/bin/pip" install --quiet --disable-pip-version-check "${PACKAGES[@]}" >&2
	echo "${PACKAGES[*]}" >"$STAMP"
	echo "$VENV/bin/python"
}

main "$@"
