#!/usr/bin/env bash
# Usage: hack/test.sh [EXTRA CARGO TEST ARGS...]
#
# The project's test command (README and .ci/run call it). Installs and starts the test bed
# (containerd instance "krs", or $KRS_INSTANCE, with the test images imported), exports its
# environment (KRS_CONTAINERD_SOCK, CONTAINER_RUNTIME_ENDPOINT, ...), then runs cargo fmt --check,
# clippy with -D warnings and cargo test --all-targets with the extra arguments.
# CARGO_TARGET_DIR defaults to /var/cache/kubelet-rs/target (outside the checkout).
# Also starts the test control plane (hack/cluster/up.sh, building it on first use).
# containerd and the control plane are stopped at the end unless KRS_KEEP_CONTAINERD=1 /
# KRS_KEEP_CLUSTER=1 or they were running already.
# When cargo test passes, runs the quick upstream e2e subset against the kubelet just built
# (e2e/run.sh --suite quick: [NodeConformance] specs that pass today, on a bed of its own that
# it takes down again; about 2 minutes). KRS_E2E_QUICK=0 leaves it out. Then kubeadm v1.20.2
# init/reset on that kubelet (e2e/kubeadm/run.sh --kubelet ours: a node in namespaces of its
# own; about a minute, plus building kubeadm and its images the first time).
# KRS_E2E_KUBEADM=0 leaves it out. Then the three install paths are built and checked with
# that same (debug) kubelet inside (about 6 minutes; KRS_PACKAGING=0 leaves them out): the Debian
# package (packaging/deb/check.sh), the Helm chart and its installer (charts/kubelet-rs/test/
# run.sh) and the kind node image (images/node/build.sh, then images/node/check.sh).
# Exit status: the first failing step's, else cargo test's.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBED="$REPO_ROOT/hack/testbed"
INSTANCE="${KRS_INSTANCE:-krs}"

log() { printf '[test] %s\n' "$*" >&2; }

STOP_CONTAINERD=0
STOP_CLUSTER=0

stop_bed() {
	if [[ "$STOP_CLUSTER" == 1 ]]; then
		"$REPO_ROOT/hack/cluster/down.sh" >/dev/null || log "warning: stopping the control plane failed"
	fi
	if [[ "$STOP_CONTAINERD" == 1 ]]; then
		"$TESTBED/containerd.sh" stop "$INSTANCE" || log "warning: stopping containerd failed"
	fi
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

# packaging_checks KUBELET: the Debian package, the Helm chart and the kind node image, each built
# around KUBELET by its own command and checked by its own check (see their READMEs).
packaging_checks() {
	local kubelet="$1"
	log "Debian package (packaging/deb/check.sh)"
	KRS_DEB_KUBELET="$kubelet" "$REPO_ROOT/packaging/deb/check.sh" || return
	log "Helm chart and its installer (charts/kubelet-rs/test/run.sh)"
	KRS_CHART_KUBELET="$kubelet" "$REPO_ROOT/charts/kubelet-rs/test/run.sh" || return
	log "kind node image (images/node/build.sh, images/node/check.sh)"
	KRS_KUBELET="$kubelet" "$REPO_ROOT/images/node/build.sh" >/dev/null || return
	"$REPO_ROOT/images/node/check.sh"
}

main() {
	if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
		echo "usage: $0 [EXTRA CARGO TEST ARGS...]" >&2
		exit 0
	fi
	cd "$REPO_ROOT"

	"$TESTBED/install.sh"
	"$TESTBED/build-pause.sh" >/dev/null
	trap stop_bed EXIT
	if "$TESTBED/containerd.sh" status "$INSTANCE" >/dev/null; then
		log "containerd $INSTANCE was running already: it stays running"
	elif [[ "${KRS_KEEP_CONTAINERD:-0}" != 1 ]]; then
		STOP_CONTAINERD=1
	fi
	"$TESTBED/containerd.sh" start "$INSTANCE" >/dev/null
	"$TESTBED/images.sh" "$INSTANCE"
	eval "$("$TESTBED/containerd.sh" env "$INSTANCE")"
	# Python's grpcio, for the test that calls pod-resources from another gRPC stack.
	KRS_GRPCIO_PYTHON="$("$TESTBED/grpcio-venv.sh")"
	export KRS_GRPCIO_PYTHON

	# The control plane for the cluster tests (built once from Debian's kubernetes source
	# package and cached under /var/cache/kubelet-rs/upstream; the first build takes minutes).
	if default_cluster_runs; then
		log "control plane was running already: it stays running"
	elif [[ "${KRS_KEEP_CLUSTER:-0}" != 1 ]]; then
		STOP_CLUSTER=1
	fi
	log "starting the control plane (hack/cluster/up.sh)"
	"$REPO_ROOT/hack/cluster/up.sh" >/dev/null

	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
	log "test bed: $KRS_CONTAINERD_SOCK; CARGO_TARGET_DIR=$CARGO_TARGET_DIR"

	log "cargo fmt --check"
	cargo fmt --all -- --check
	log "cargo clippy"
	cargo clippy --all-targets -- -D warnings
	log "cargo test"
	local status=0
	cargo test --all-targets "$@" || status=$?
	if [[ "$status" == 0 && "${KRS_E2E_QUICK:-1}" != 0 ]]; then
		log "upstream e2e, quick subset (e2e/run.sh --suite quick)"
		KRS_E2E_KUBELET="$CARGO_TARGET_DIR/debug/kubelet" \
			"$REPO_ROOT/e2e/run.sh" --kubelet ours --suite quick --parallel 3 --no-results || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_E2E_KUBEADM:-1}" != 0 ]]; then
		log "kubeadm init on our kubelet (e2e/kubeadm/run.sh)"
		KRS_KUBEADM_KUBELET="$CARGO_TARGET_DIR/debug/kubelet" \
			"$REPO_ROOT/e2e/kubeadm/run.sh" --kubelet ours || status=$?
	fi
	if [[ "$status" == 0 && "${KRS_PACKAGING:-1}" != 0 ]]; then
		packaging_checks "$CARGO_TARGET_DIR/debug/kubelet" || status=$?
	fi
	return "$status"
}

main "$@"
