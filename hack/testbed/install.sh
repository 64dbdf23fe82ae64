#!/usr/bin/env bash
# Usage: hack/testbed/install.sh
#
# Installs the Debian packages the test bed runs on (containerd, runc, CNI plugins, a static
# busybox for the test images, iproute2, iptables, python3, libc6-dev; not libc6-dev, nor cargo,
# where the images come prebuilt: KRS_PREBUILT_IMAGES). Does nothing, quickly,
# when all of them are there already; otherwise runs apt-get update once and installs what is
# missing.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { echo "usage: $0" >&2; }

# package:command pairs; the command (or an absolute path to a file) is what the bed uses.
REQUIRED=(
	containerd:containerd
	runc:runc
	containernetworking-plugins:/usr/lib/cni/bridge
	busybox-static:/bin/busybox
	iproute2:ip
	iptables:iptables
	python3:python3
)
# What building the test images needs; not where they come prebuilt (KRS_PREBUILT_IMAGES,
# hack/testbed/image_lib.sh: a VM of e2e/vm), which is also without cargo.
BUILD_REQUIRED=(
	# libc.a: the pause binary is linked statically.
	libc6-dev:/usr/include/stdio.h
)
[[ -n "${KRS_PREBUILT_IMAGES:-}" ]] || REQUIRED+=("${BUILD_REQUIRED[@]}")

installed() {
	local pkg="$1" cmd="$2" status
	status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
	[[ "$status" == "install ok installed" ]] || return 1
	if [[ "$cmd" == /* ]]; then
		[[ -e "$cmd" ]]
	else
		command -v "$cmd" >/dev/null
	fi
}

main() {
	if [[ $# -gt 0 ]]; then
		usage
		exit 2
	fi
	local missing=() entry
	for entry in "${REQUIRED[@]}"; do
		installed "${entry%%:*}" "${entry#*:}" || missing+=("${entry%%:*}")
	done
	# ctr ships with containerd; checked on its own because the bed drives everything with it.
	if [[ ${#missing[@]} -eq 0 ]] && ! command -v ctr >/dev/null; then
		missing+=(containerd)
	fi
	if [[ ${#missing[@]} -eq 0 ]]; then
		krs_log "packages present"
	else
		krs_require_root
		krs_log "installing: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
		for entry in "${REQUIRED[@]}"; do
			installed "${entry%%:*}" "${entry#*:}" || krs_die "package ${entry%%:*} did not install"
		done
	fi
	[[ -n "${KRS_PREBUILT_IMAGES:-}" ]] || command -v cargo >/dev/null ||
		krs_die "cargo not found: install a Rust toolchain (rustup) first"
}

main "$@"
