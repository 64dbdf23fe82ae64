# shellcheck shell=bash disable=SC2034
# The upstream binaries' cache, for every script that runs one. Sourced, never run.
#
# Which binaries exist and who needs them is hack/upstream/targets, the one list: a stage builds
# what its use lacks (krs_upstream_ensure USE...) and finds a binary with krs_upstream_bin NAME,
# which fails, naming the binary and the command that builds it, rather than leave a bare
# "No such file or directory" to whatever runs it.
#
# Under hack/test.sh, KRS_UPSTREAM_PREBUILT holds the names it built up front: a stage that asks
# for any other binary (or a build of one) then fails at once, even where the cache has it from
# an earlier run, so that no stage depends on what an earlier run left behind.

KRS_UPSTREAM_LIST="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/targets"
KRS_UPSTREAM_CACHE="${KRS_UPSTREAM_CACHE:-${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/upstream}"
KRS_UPSTREAM_BIN_DIR="$KRS_UPSTREAM_CACHE/bin"

krs_upstream_die() {
	printf '[upstream] error: %s\n' "$*" >&2
	exit 1
}

# krs_upstream_targets USE...: the targets of hack/upstream/targets that any USE needs, one per
# line, in the list's order; USE "all" means every target. Fails on a use no line names.
krs_upstream_targets() {
	local use
	for use in "$@"; do
		[[ "$use" == all ]] && continue
		awk -v u="$use" '!/^[[:space:]]*(#|$)/ { for (i = 2; i <= NF; i++) if ($i == u) f = 1 }
			END { exit !f }' "$KRS_UPSTREAM_LIST" ||
			krs_upstream_die "no target of $KRS_UPSTREAM_LIST is used by '$use'"
	done
	awk -v uses=" $* " '!/^[[:space:]]*(#|$)/ {
			for (i = 2; i <= NF; i++) if (index(uses, " " $i " ") || index(uses, " all ")) { print $1; next }
		}' "$KRS_UPSTREAM_LIST"
}

# krs_upstream_target NAME: the build.sh target whose binary is NAME (cmd/kubectl for kubectl).
krs_upstream_target() {
	local t
	t="$(awk -v n="$1" '!/^[[:space:]]*(#|$)/ { k = split($1, p, "/"); if (p[k] == n) { print $1; exit } }' \
		"$KRS_UPSTREAM_LIST")"
	[[ -n "$t" ]] || krs_upstream_die "$1 is not an upstream binary of $KRS_UPSTREAM_LIST: list it there, with its use"
	printf '%s\n' "$t"
}

# Fails if hack/test.sh built its binaries up front and NAME is not one of them.
krs_upstream_check_prebuilt() {
	[[ -n "${KRS_UPSTREAM_PREBUILT:-}" ]] || return 0
	[[ " $KRS_UPSTREAM_PREBUILT " == *" $1 "* ]] ||
		krs_upstream_die "$1 is not among the upstream binaries hack/test.sh built up front ($KRS_UPSTREAM_PREBUILT): add the use that needs it to $KRS_UPSTREAM_LIST and to hack/test.sh's stages"
}

# krs_upstream_bin NAME: prints the path of upstream binary NAME; fails, naming the command that
# builds it, if it is not there.
krs_upstream_bin() {
	local name="$1" target path
	target="$(krs_upstream_target "$name")"
	krs_upstream_check_prebuilt "$name"
	path="$KRS_UPSTREAM_BIN_DIR/$name"
	[[ -x "$path" ]] ||
		krs_upstream_die "$name v1.20.2 is missing: no executable $path; build it with: hack/upstream/build.sh $target"
	printf '%s\n' "$path"
}

# krs_upstream_ensure USE...: builds, in one hack/upstream/build.sh call, the targets of the
# uses whose binaries are missing (the first build takes 10-15 min); then checks each one.
krs_upstream_ensure() {
	local targets=() missing=() t
	mapfile -t targets < <(krs_upstream_targets "$@")
	((${#targets[@]})) || krs_upstream_die "krs_upstream_ensure: no targets for: $*"
	for t in "${targets[@]}"; do
		krs_upstream_check_prebuilt "$(basename "$t")"
		[[ -x "$KRS_UPSTREAM_BIN_DIR/$(basename "$t")" ]] || missing+=("$t")
	done
	if ((${#missing[@]})); then
		printf '[upstream] building %s (hack/upstream/build.sh; 10-15 min when cold)\n' "${missing[*]}" >&2
		"$(dirname "$KRS_UPSTREAM_LIST")/build.sh" "${missing[@]}" >&2 ||
			krs_upstream_die "hack/upstream/build.sh ${missing[*]} failed"
	fi
	for t in "${targets[@]}"; do
		krs_upstream_bin "$(basename "$t")" >/dev/null
	done
}
