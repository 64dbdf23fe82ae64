#!/usr/bin/env bash
# Usage: hack/run-standalone.sh [EXTRA KUBELET ARGS...]
#
# Runs kubelet-rs in the foreground on this machine without an API server: static pods from
# /var/lib/kubelet-rs/demo/manifests (a demo busybox pod is written there if absent), on the
# test bed's containerd (instance "krs", or $KRS_INSTANCE, started if needed and left running;
# stop it with hack/testbed/containerd.sh stop). Extra arguments go to the kubelet.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTBED="$REPO_ROOT/hack/testbed"
INSTANCE="${KRS_INSTANCE:-krs}"
DEMO="/var/lib/kubelet-rs/demo"

# shellcheck source=hack/testbed/lib.sh
source "$TESTBED/lib.sh"

write_demo_manifest() {
	local manifest="$DEMO/manifests/demo.yaml"
	mkdir -p "$DEMO/manifests" "$DEMO/root"
	[[ -e "$manifest" ]] && return 0
	cat >"$manifest" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: demo
  namespace: default
spec:
  containers:
    - name: clock
      image: docker.io/library/busybox:1.36
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "while true; do date; sleep 5; done"]
YAML
	krs_log "wrote $manifest"
}

main() {
	if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
		echo "usage: $0 [EXTRA KUBELET ARGS...]" >&2
		exit 0
	fi
	cd "$REPO_ROOT"
	"$TESTBED/install.sh"
	"$TESTBED/containerd.sh" start "$INSTANCE" >/dev/null
	"$TESTBED/images.sh" "$INSTANCE"
	eval "$("$TESTBED/containerd.sh" env "$INSTANCE")"

	export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
	cargo build --release
	local kubelet="$CARGO_TARGET_DIR/release/kubelet"
	[[ -x "$kubelet" ]] || krs_die "no kubelet binary at $kubelet"

	write_demo_manifest
	krs_ensure_cgroup_root kubelet-rs
	local node
	node="$(hostname | tr '[:upper:]' '[:lower:]')"

	cat >&2 <<HINT

kubelet-rs runs static pods from $DEMO/manifests on $KRS_CONTAINERD_SOCK. To watch it:
  curl -s localhost:10255/pods
  curl -s localhost:10255/stats/summary
  curl -sk https://localhost:10250/containerLogs/default/demo-$node/clock
  ls /var/log/pods/
  tail -f /var/log/pods/default_demo-*/*/0.log
  ctr --address $KRS_CONTAINERD_SOCK -n k8s.io containers ls
Stop with Ctrl-C; containerd keeps running until: hack/testbed/containerd.sh stop $INSTANCE

HINT
	exec "$kubelet" \
		--pod-manifest-path "$DEMO/manifests" \
		--container-runtime-endpoint "$CONTAINER_RUNTIME_ENDPOINT" \
		--root-dir "$DEMO/root" \
		--cert-dir "$DEMO/pki" \
		--cgroup-root /kubelet-rs \
		--read-only-port 10255 \
		--fail-swap-on=false \
		--hostname-override "$node" \
		--v 2 \
		"$@"
}

main "$@"
