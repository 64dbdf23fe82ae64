#!/usr/bin/env bash
# Usage: hack/test.sh [EXTRA CARGO TEST ARGS...]
#
# The project's test command (README and .ci/run call it). In order:
#   1. installs the test bed's packages (hack/testbed/install.sh) and builds, in one
#      hack/upstream/build.sh call, every upstream v1.20.2 binary a later stage or test runs: the
#      targets hack/upstream/targets lists for the uses of the stages below (7 to 13 minutes
#      when cold, nothing when cached). Later stages are then held to that set
#      (KRS_UPSTREAM_PREBUILT, hack/upstream/lib.sh): one that needs another binary fails at once,
#      whatever the cache holds;
#   2. starts the test bed (containerd instance "krs", or $KRS_INSTANCE, with the test images
#      imported) and exports its environment (KRS_CONTAINERD_SOCK, CONTAINER_RUNTIME_ENDPOINT,
#      ...), then the test control plane (hack/cluster/up.sh);
#   3. cargo fmt --check, clippy with -D warnings and cargo test --all-targets with the extra
#      arguments;
#   4. when cargo test passes, the quick upstream e2e subset against the kubelet just built
#      (e2e/run.sh --suite quick: the [NodeConformance] specs of e2e/quick.txt, every one of which
#      must run and pass, on a bed of its own that it takes down again; about 2 minutes).
#      KRS_E2E_QUICK=0 leaves it out;
#   5. kubeadm v1.20.2 init/reset on that kubelet (e2e/kubeadm/run.sh --kubelet ours: a node in
#      namespaces of its own; about a minute). KRS_E2E_KUBEADM=0 leaves it out;
#   6. the cgroup v2 smoke (e2e/vm/run.sh smoke): a Debian VM under qemu with systemd on cgroup v2
#      only, our .deb (of that same debug kubelet) installed, a static pod's cgroup v2 files, an
#      OOM kill, stats, healthz and the PLEG (relist: containerd 1.6 has no container events)
#      checked (about 4 minutes under TCG, the image build included).
#      KRS_VM_SMOKE=0 leaves it out;
#   7. the three install paths built and checked with that same (debug) kubelet inside (about 6
#      minutes; KRS_PACKAGING=0 leaves them out): the Debian package (packaging/deb/check.sh),
#      the Helm chart and its installer (charts/kubelet-rs/test/run.sh) and the kind node image
#      (images/node/build.sh, then images/node/check.sh).
# At the end (on failure too) it prints how long each stage took.
#
# CARGO_TARGET_DIR defaults to /var/cache/kubelet-rs/target, the other caches (upstream binaries,
# test images, packaging) live under KRS_CACHE_DIR (default /var/cache/kubelet-rs): outside the
# checkout. containerd and the control plane are stopped at the end unless KRS_KEEP_CONTAINERD=1
# / KRS_KEEP_CLUSTER=1 or they were running already.
#
# KRS_FRESH=1 runs as a fresh machine would, with every cache empty: KRS_CACHE_DIR (so the
# upstream cache too), CARGO_TARGET_DIR and CARGO_HOME (cargo's registry) point into a new folder
# under /var/tmp, removed at the end (KRS_KEEP_FRESH=1 keeps it). Packages already installed and
# the state under /var/lib/kubelet-rs stay as they are.
#
# Exit status: the first failing step's, else cargo test's.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBED="$REPO_ROOT/hack/testbed"
INSTANCE="${KRS_INSTANCE:-krs}"

log() { printf '[test %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

STOP_CONTAINERD=0
STOP_CLUSTER=0
FRESH_DIR=""
START_S=$SECONDS
STAGE_NAME=""
STAGE_START=0
STAGE_NAMES=()
STAGE_TIMES=()
STAGE_RESULTS=()

# stage NAME COMMAND...: runs COMMAND as one timed stage of the summary and returns its status.
# Called plainly, a failure ends the script (set -e; on_exit books the stage as failed); called
# as `stage ... || status=$?`, the run goes on.
stage() {
	STAGE_NAME="$1"
	STAGE_START=$SECONDS
	shift
	log "$STAGE_NAME"
	"$@"
	local rc=$?
	stage_done "$rc"
	return "$rc"
}

stage_done() {
	STAGE_NAMES+=("$STAGE_NAME")
	STAGE_TIMES+=("$((SECONDS - STAGE_START))")
	if (($1 == 0)); then STAGE_RESULTS+=(ok); else STAGE_RESULTS+=("failed ($1)"); fi
	STAGE_NAME=""
}

fmt_s() { printf '%d min %02d s' "$(($1 / 60))" "$(($1 % 60))"; }

print_timings() {
	local i
	((${#STAGE_NAMES[@]})) || return 0
	{
		printf '\n[test] stage timings\n'
		for i in "${!STAGE_NAMES[@]}"; do
			printf '  %-44s %12s  %s\n' "${STAGE_NAMES[$i]}" "$(fmt_s "${STAGE_TIMES[$i]}")" "${STAGE_RESULTS[$i]}"
		done
		printf '  %-44s %12s\n' "total (wall)" "$(fmt_s "$((SECONDS - START_S))")"
	} >&2
}

on_exit() {
	local rc=$?
	[[ -z "$STAGE_NAME" ]] || stage_done "$rc"
	if [[ "$STOP_CLUSTER" == 1 ]]; then
		"$REPO_ROOT/hack/cluster/down.sh" >/dev/null || log "warning: stopping the control plane failed"
	fi
	if [[ "$STOP_CONTAINERD" == 1 ]]; then
		"$TESTBED/containerd.sh" stop "$INSTANCE" || log "warning: stopping containerd failed"
	fi
	if [[ -n "$FRESH_DIR" ]]; then
		if [[ "${KRS_KEEP_FRESH:-0}" == 1 ]]; then
			log "KRS_KEEP_FRESH=1: the fresh caches stay in $FRESH_DIR"
		else
			rm -rf --one-file-system "$FRESH_DIR" || log "warning: removing $FRESH_DIR failed"
		fi
	fi
	print_timings
	exit "$rc"
}

# Every cache in a new, empty folder: what a machine that never ran this has.
use_fresh_caches() {
	FRESH_DIR="$(mktemp -d /var/tmp/kubelet-rs-fresh.XXXXXX)"
	# As /var/cache is: a check that runs a tool as nobody (lintian) must reach its files.
	chmod 755 "$FRESH_DIR"
	export KRS_CACHE_DIR="$FRESH_DIR/cache"
	export KRS_UPSTREAM_CACHE="$KRS_CACHE_DIR/upstream"
	export CARGO_TARGET_DIR="$FRESH_DIR/target"
	export CARGO_HOME="$FRESH_DIR/cargo-home"
	# The caches that would otherwise not follow KRS_CACHE_DIR.
	unset KRS_DEB_CACHE NODE_CACHE
	mkdir -p "$KRS_CACHE_DIR" "$CARGO_HOME"
	log "KRS_FRESH=1: every cache starts empty under $FRESH_DIR"
}

# Whether the default test control plane's kube-apiserver runs, by the pid up.sh recorded (a
# control plane of another name, or any other kube-apiserver, does not count).
default_cluster_runs() {
	local run pid
	run="$("$REPO_ROOT/hack/cluster/env.sh" 2>/dev/null | sed -n 's/^export KRS_CLUSTER_RUN_DIR=//p')" ||
		return 1
	[[ -n "$run" && -r "$run/kube-apiserver.pid" ]] || return 1
	pid="$(<"$run/kube-apiserver.pid")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F kube-apiserver >/dev/null
}

# The uses (hack/upstream/targets) of the stages this run has.
upstream_uses() {
	local uses=(cluster tests)
	[[ "${KRS_E2E_QUICK:-1}" == 0 ]] || uses+=(e2e e2e-images)
	[[ "${KRS_E2E_KUBEADM:-1}" == 0 ]] || uses+=(kubeadm)
	[[ "${KRS_PACKAGING:-1}" == 0 ]] || uses+=(node-image)
	printf '%s\n' "${uses[@]}"
}

# Builds what the stages' uses need, in one build.sh call, then holds the stages to it.
build_upstream() {
	local uses=() targets=() t names=()
	mapfile -t uses < <(upstream_uses)
	mapfile -t targets < <(krs_upstream_targets "${uses[@]}")
	log "upstream binaries for ${uses[*]}: ${targets[*]}"
	krs_upstream_ensure "${uses[@]}"
	for t in "${targets[@]}"; do names+=("$(basename "$t")"); done
	export KRS_UPSTREAM_PREBUILT="${names[*]}"
}

start_containerd() {
	if "$TESTBED/containerd.sh" status "$INSTANCE" >/dev/null; then
		log "containerd $INSTANCE was running already: it stays running"
	elif [[ "${KRS_KEEP_CONTAINERD:-0}" != 1 ]]; then
		STOP_CONTAINERD=1
	fi
	"$TESTBED/containerd.sh" start "$INSTANCE" >/dev/null
	"$TESTBED/images.sh" "$INSTANCE"
}

start_cluster() {
	if default_cluster_runs; then
		log "control plane was running already: it stays running"
	elif [[ "${KRS_KEEP_CLUSTER:-0}" != 1 ]]; then
		STOP_CLUSTER=1
	fi
	"$REPO_ROOT/hack/cluster/up.sh" >/dev/null
}

# Python's grpcio, for the test that calls pod-resources from another gRPC stack.
grpcio_venv() {
	KRS_GRPCIO_PYTHON="$("$TESTBED/grpcio-venv.sh")"
	export KRS_GRPCIO_PYTHON
}

main() {
	if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
	fi
	cd "$REPO_ROOT"
	trap on_exit EXIT
	# Without these the EXIT trap of a killed run sees the last command's status, and books the
	# stage it interrupted as ok.
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
	[[ "${KRS_FRESH:-0}" != 1 ]] || use_fresh_caches
	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/target}"
	# shellcheck source=hack/upstream/lib.sh
	source "$REPO_ROOT/hack/upstream/lib.sh"

	stage "test bed packages (hack/testbed/install.sh)" "$TESTBED/install.sh"
	stage "upstream binaries (hack/upstream/build.sh)" build_upstream
	stage "pause image binary (hack/testbed/build-pause.sh)" "$TESTBED/build-pause.sh" >/dev/null
	stage "containerd $INSTANCE and the test images" start_containerd
	eval "$("$TESTBED/containerd.sh" env "$INSTANCE")"
	stage "grpcio venv (hack/testbed/grpcio-venv.sh)" grpcio_venv
	stage "control plane (hack/cluster/up.sh)" start_cluster
	log "test bed: $KRS_CONTAINERD_SOCK; CARGO_TARGET_DIR=$CARGO_TARGET_DIR; upstream: $KRS_UPSTREAM_BIN_DIR"

	stage "cargo fmt --check" cargo fmt --all -- --check
	stage "cargo clippy" cargo clippy --all-targets -- -D warnings
	local status=0
	stage "cargo test" cargo test --all-targets "$@" || status=$?
	local kubelet="$CARGO_TARGET_DIR/debug/kubelet"
	if [[ "$status" == 0 && "${KRS_E2E_QUICK:-1}" != 0 ]]; then
		KRS_E2E_KUBELET="$kubelet" stage "upstream e2e, quick subset (e2e/run.sh --suite quick)" \
			"$REPO_ROOT/e2e/run.sh" --kubelet ours --suite quick --parallel 3 --no-results || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_E2E_KUBEADM:-1}" != 0 ]]; then
		KRS_KUBEADM_KUBELET="$kubelet" stage "kubeadm init on our kubelet (e2e/kubeadm/run.sh)" \
			"$REPO_ROOT/e2e/kubeadm/run.sh" --kubelet ours || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_VM_SMOKE:-1}" != 0 ]]; then
		KRS_DEB_KUBELET="$kubelet" stage "cgroup v2 smoke in a VM (e2e/vm/run.sh smoke)" \
			"$REPO_ROOT/e2e/vm/run.sh" smoke || status=$?
	fi
	# The three install paths, each built around the debug kubelet by its own command and checked
	# by its own check (see their READMEs).
	if [[ "$status" == 0 && "${KRS_PACKAGING:-1}" != 0 ]]; then
		KRS_DEB_KUBELET="$kubelet" stage "Debian package (packaging/deb/check.sh)" \
			"$REPO_ROOT/packaging/deb/check.sh" || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_PACKAGING:-1}" != 0 ]]; then
		KRS_CHART_KUBELET="$kubelet" stage "Helm chart and installer (charts/kubelet-rs/test/run.sh)" \
			"$REPO_ROOT/charts/kubelet-rs/test/run.sh" || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_PACKAGING:-1}" != 0 ]]; then
		KRS_KUBELET="$kubelet" stage "kind node image (images/node/build.sh)" \
			"$REPO_ROOT/images/node/build.sh" >/dev/null || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_PACKAGING:-1}" != 0 ]]; then
		stage "kind node image check (images/node/check.sh)" "$REPO_ROOT/images/node/check.sh" || status=$?
	fi
	return "$status"
}

main "$@"
