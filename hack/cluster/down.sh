#!/usr/bin/env bash
# Usage: hack/cluster/down.sh [--purge] [NAME]
#
# Stops the local control plane NAME (default "krs") started by up.sh: only the processes
# whose pid files up.sh wrote, and only if they still are our components. Certificates,
# etcd data and kubeconfigs stay unless --purge, which deletes
# /var/lib/kubelet-rs/cluster/NAME and /run/kubelet-rs/cluster/NAME.
set -euo pipefail

# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { echo "usage: $0 [--purge] [NAME]" >&2; }

main() {
	local purge=0 name=""
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--purge) purge=1 ;;
		-h | --help)
			usage
			exit 0
			;;
		-*)
			usage
			exit 2
			;;
		*)
			[[ -z "$name" ]] || {
				usage
				exit 2
			}
			name="$1"
			;;
		esac
		shift
	done
	cl_require_root
	cl_vars "${name:-$KRS_CL_DEFAULT_NAME}"
	if [[ -d "$CL_STATE" ]]; then
		exec 9>"$CL_LOCK"
		flock -w 300 9 || cl_die "another up.sh/down.sh holds $CL_LOCK"
	fi
	local i
	for ((i = ${#KRS_CL_COMPONENTS[@]} - 1; i >= 0; i--)); do
		cl_stop "${KRS_CL_COMPONENTS[i]}"
	done
	cl_log "cluster $CL_NAME stopped"
	if ((purge)); then
		rm -rf --one-file-system "$CL_STATE" "$CL_RUN"
		cl_log "cluster $CL_NAME purged"
	fi
}

main "$@"
