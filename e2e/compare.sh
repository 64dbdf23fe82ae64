#!/usr/bin/env bash
# Usage: e2e/compare.sh [SUITE...]
#
# Merges the latest runs of our kubelet and upstream's kept in e2e/results/SUITE/{ours,upstream}/
# (e2e/run.sh --suite SUITE writes them) into e2e/results/SUITE/specs.tsv and specs.md: per spec,
# pass / fail / skip for each kubelet, and for our failures the first line of the failure. Then
# rewrites the generated part of e2e/results/README.md: the summary table of every run there and
# a per-area comparison per suite. SUITE defaults to every suite under e2e/results/. Needs no
# root and no cluster: it only reads and writes files.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="$HERE/results"

log() { printf '[e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

main() {
	case "${1:-}" in -h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		return 0
		;;
	esac
	local suites=("$@") suite
	if ((${#suites[@]} == 0)); then
		for suite in "$RESULTS"/*/; do
			[[ -d "$suite" ]] && suites+=("$(basename "$suite")")
		done
	fi
	for suite in "${suites[@]}"; do
		[[ -d "$RESULTS/$suite" ]] || {
			log "no results for $suite in $RESULTS"
			exit 1
		}
		python3 "$HERE/junit.py" compare --results "$RESULTS" --suite "$suite"
		log "wrote $RESULTS/$suite/specs.tsv and specs.md"
	done
	python3 "$HERE/junit.py" readme --results "$RESULTS"
	log "wrote $RESULTS/README.md"
}

main "$@"
