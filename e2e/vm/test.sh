#!/usr/bin/env bash
# Usage: e2e/vm/test.sh [--suite bookworm|trixie] [--only T,...] [--keep] [-- FILTER...]
#        (e2e/vm/run.sh test; as root)
#
# The project's integration tests that touch cgroups, run inside a VM with systemd as PID 1 on
# cgroup v2 only: the very test binaries `cargo test` builds on this machine, not copies of
# their code. In order:
#   1. on the machine: `cargo test --no-run` for the test targets below (and so the kubelet
#      they start), the upstream binaries of the uses "cluster" and "tests" (hack/upstream), and
#      the test images' tarballs (hack/testbed/images.sh --list);
#   2. one VM (e2e/vm/run.sh up, 4096 MiB) that mounts the checkout, the cargo target folder and
#      the cache folder read-only at the machine's paths (virtio 9p), so the binaries find
#      everything where they were built to look;
#   3. in the VM, the tests' own bed, by the same scripts as on the machine: containerd "krs"
#      (hack/testbed/containerd.sh) with the tarballs imported (KRS_PREBUILT_IMAGES: no cargo in
#      the VM), the test control plane (hack/cluster/up.sh, with the VM's etcd-server);
#   4. each test binary in turn (--only: just those named), one test at a time (their tests
#      share the bed), with the FILTER arguments if given (libtest's: a name substring, --exact,
#      --skip ...); 8 huge pages of 2 MiB are reserved for tests/hugepages.rs only. The tests
#      that need a systemd use the VM's own (KRS_IT_MACHINE_SYSTEMD=1,
#      tests/common/systemd_node.rs); the cgroup checks read v2 files (tests/common/cgroup.rs).
# Prints each binary's result and time, then a summary; exits non-zero if any failed. The VM
# goes at the end unless --keep (then e2e/vm/run.sh exec vm1 -- ... reaches it, down removes it).
# A VM bed that is up already is refused: e2e/vm/run.sh down first.
#
# Env: KRS_VM_TEST_TIMEOUT (seconds per test binary, default 1200), CARGO_TARGET_DIR and
# KRS_CACHE_DIR as for hack/test.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"

# The test targets (tests/*.rs) this runs: what reads or writes cgroups, or needs a systemd.
TESTS=(systemd_driver resize oom eviction node_shutdown api_stats hugepages allocatable)
TEST_TIMEOUT="${KRS_VM_TEST_TIMEOUT:-1200}"
MEMORY=4096

usage() { sed -n '2,3p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

# build_tests: prints "NAME EXECUTABLE" for every test target of TESTS.
build_tests() {
	local args=() t
	for t in "${TESTS[@]}"; do args+=(--test "$t"); done
	(cd "$VM_REPO" && cargo test --no-run --message-format=json "${args[@]}") |
		jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and .executable != null)
			| "\(.target.name) \(.executable)"'
}

# The in-VM part: the tests' bed, then each binary. Arguments: LIST FILTER...; the environment
# comes in as exports at the head of the script.
IN_VM=$(
	cat <<'VMEOF'
set -uo pipefail
cd "$KRS_VM_REPO"
log() { printf '[vm1 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
hack/testbed/containerd.sh start krs >/dev/null || { log "containerd krs did not start"; exit 1; }
hack/testbed/images.sh krs || exit 1
eval "$(hack/testbed/containerd.sh env krs)"
hack/cluster/up.sh >/dev/null || { log "the test control plane did not start"; exit 1; }
log "bed up: $(containerd --version | cut -d' ' -f3), runc $(runc --version | sed -n '1s/.* //p'), $(stat -fc %T /sys/fs/cgroup), PID 1 $(ps -o comm= -p 1)"
failed=0
while read -r name exe; do
	t0=$SECONDS
	# 16 MiB of 2 MiB huge pages for tests/hugepages.rs to run its pod with; none for the rest,
	# whose memory figures (eviction's allocatable) count on all of MemTotal being ordinary.
	pages=0
	[[ "$name" == hugepages ]] && pages=8
	echo "$pages" >/proc/sys/vm/nr_hugepages
	log "test $name: $exe ($(awk '/HugePages_Total/ {print $2}' /proc/meminfo) huge pages)"
	if timeout "$KRS_VM_TEST_TIMEOUT" "$exe" --test-threads=1 "$@" </dev/null >"/var/tmp/krs-vm-test-$name.log" 2>&1; then
		log "test $name: ok in $((SECONDS - t0)) s ($(grep -E '^test result' "/var/tmp/krs-vm-test-$name.log" | tail -1))"
		echo "$name ok $((SECONDS - t0))" >>/var/tmp/krs-vm-test.summary
	else
		rc=$?
		failed=1
		tail -80 "/var/tmp/krs-vm-test-$name.log" >&2
		log "test $name: FAILED (status $rc) in $((SECONDS - t0)) s"
		echo "$name failed $((SECONDS - t0))" >>/var/tmp/krs-vm-test.summary
	fi
done </var/tmp/krs-vm-tests.list
hack/cluster/down.sh >/dev/null 2>&1 || true
hack/testbed/containerd.sh stop krs >/dev/null 2>&1 || true
exit "$failed"
VMEOF
)

main() {
	local suite=bookworm keep=0 filter=()
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--suite) suite="${2:?--suite takes a value}"; shift 2 ;;
		--keep) keep=1; shift ;;
		--only)
			local only t
			IFS=, read -ra only <<<"${2:?--only takes test targets}"
			for t in "${only[@]}"; do
				[[ " ${TESTS[*]} " == *" $t "* ]] || vm_die "--only $t: not one of ${TESTS[*]}"
			done
			TESTS=("${only[@]}")
			shift 2
			;;
		--) shift; filter=("$@"); break ;;
		*) usage; exit 2 ;;
		esac
	done
	vm_require_root
	vm_build_begin

	local t0=$SECONDS tests
	vm_log "building the test binaries (cargo test --no-run: ${TESTS[*]})"
	tests="$(build_tests)"
	[[ "$(wc -l <<<"$tests")" -eq "${#TESTS[@]}" ]] ||
		vm_die "cargo test --no-run gave $(wc -l <<<"$tests") test binaries for ${#TESTS[@]} targets"
	krs_upstream_ensure cluster tests
	"$VM_REPO/hack/testbed/images.sh" --list "$VM_BUILT_LIST" 2>/dev/null
	vm_log "built in $((SECONDS - t0)) s"

	# The VM's own kubelet service is not what the tests run: the debug kubelet they start goes
	# into the package too, sparing a release build.
	export KRS_DEB_KUBELET="${KRS_DEB_KUBELET:-$CARGO_TARGET_DIR/debug/kubelet}"
	vm_up_built "$suite" "$MEMORY" "$keep"
	vm_ssh 1 'cat >/var/tmp/krs-vm-tests.list' <<<"$tests"
	vm_ssh 1 'rm -f /var/tmp/krs-vm-test.summary'
	local env args="" status=0 t1=$SECONDS
	env="$(vm_built_env)"$'\n'"$(printf 'export %s=%q\n' KRS_VM_REPO "$VM_REPO" \
		KRS_VM_TEST_TIMEOUT "$TEST_TIMEOUT" KRS_IT_MACHINE_SYSTEMD 1)"
	((${#filter[@]} == 0)) || printf -v args '%q ' "${filter[@]}"
	vm_ssh 1 "bash -c $(printf %q "$env"$'\n'"$IN_VM") krs-vm-test $args" </dev/null ||
		status=$?
	printf '\n[vm] integration tests in a cgroup v2 VM (%s): %d s in the VM, %d s in all\n' \
		"$suite" "$((SECONDS - t1))" "$((SECONDS - VM_T0))" >&2
	vm_ssh 1 'cat /var/tmp/krs-vm-test.summary' </dev/null |
		awk '{ printf "  %-16s %-7s %5d s\n", $1, $2, $3 }' >&2 || true
	((status == 0)) || vm_die "integration tests failed in the VM (status $status)"
	vm_log "every test binary passed in the VM"
}

main "$@"
