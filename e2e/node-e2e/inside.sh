#!/usr/bin/env bash
# Usage: e2e/node-e2e/inside.sh ARG...     (started by e2e/node-e2e/run.sh only)
#
# The node-e2e bed's inside (e2e/node-e2e/lib.sh): run.sh starts it in the bed's network
# namespace with new mount and UTS namespaces,
#   nsenter --net=/run/netns/krs-ne2e unshare --mount --uts --propagation private inside.sh ...
# and passes e2e_node.test's arguments. In there it
#   - sets the hostname to the node name and makes private what the suite's kubelet writes
#     outside its folders: /var/lib/kubelet (the suite's fixed root dir, device-plugins socket
#     folder included), /var/log/pods, /var/log/containers, /etc/hosts (the node's name and
#     address), /etc/resolv.conf (no resolver), and the sysctls that are not per network
#     namespace;
#   - hides systemd-run (the machine has no systemd as PID 1; the suite would start the kubelet
#     through it if it found one) and puts the shims (sudo, systemctl) first on PATH;
#   - starts the test-bed containerd NE2E_INSTANCE and imports the images run.sh built
#     (NE2E_IMAGE_LISTS);
#   - starts config-agent.sh, then e2e_node.test in NE2E_SUITE_DIR with the arguments given;
#     e2e_node.test starts etcd, the apiserver and the kubelet in NE2E_BIN_DIR itself.
# When the suite ends (or on SIGTERM) it stops the agent and the suite, and any kubelet the
# suite left, purges the containerd instance, unmounts what the kubelet mounted and removes the
# cgroups the kubelet made at the hierarchies' root (kubepods, kubelet). Exits with the suite's
# status.
# Environment (set by run.sh): NE2E_ARTIFACTS, NE2E_KUBECTL, NE2E_IMAGE_LISTS (files, colon
# separated), NE2E_SUITE_BIN.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/node-e2e/lib.sh
source "$HERE/lib.sh"
TESTBED="$NE2E_REPO/hack/testbed"

SUITE_PID=""
AGENT_PID=""
CONTAINERD_STARTED=0

privatize() {
	local priv="$NE2E_PRIVATE"
	mkdir -p "$priv/pod-logs" "$priv/container-logs" "$priv/kubelet" \
		/var/log/pods /var/log/containers /var/lib/kubelet
	e2e_private_sysctls "$priv/sysctl"
	{
		printf '127.0.0.1 localhost\n::1 localhost\n'
		printf '%s %s\n' "$NE2E_NODE_IP" "$NE2E_NODE"
	} >"$priv/hosts"
	mount --bind "$priv/hosts" /etc/hosts
	printf '# kubelet-rs node-e2e bed: no DNS server here\nnameserver 127.0.0.1\n' >"$NE2E_RESOLV_CONF"
	mount --bind "$NE2E_RESOLV_CONF" /etc/resolv.conf
	mount --bind "$priv/pod-logs" /var/log/pods
	mount --bind "$priv/container-logs" /var/log/containers
	mount --bind "$priv/kubelet" /var/lib/kubelet
	# exec.LookPath skips a file without execute bits: the suite then starts the kubelet itself.
	local sr
	sr="$(command -v systemd-run 2>/dev/null || true)"
	[[ -z "$sr" ]] || mount --bind /dev/null "$sr"
	hostname "$NE2E_NODE"
}

import_images() {
	local list lists
	IFS=: read -r -a lists <<<"$NE2E_IMAGE_LISTS"
	for list in "${lists[@]}"; do
		KRS_PREBUILT_IMAGES="$list" "$TESTBED/images.sh" "$NE2E_INSTANCE" \
			>>"$NE2E_ARTIFACTS/images.log" 2>&1 ||
			ne2e_die "importing $list failed; see $NE2E_ARTIFACTS/images.log"
	done
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT TERM
	ne2e_log "taking the bed down"
	[[ -z "$AGENT_PID" ]] || { kill -TERM "$AGENT_PID" 2>/dev/null; wait "$AGENT_PID" 2>/dev/null; }
	# The kubelet is the suite's child: found before the suite goes, stopped once it has.
	local left=() p want
	mapfile -t left < <(ne2e_kubelet_pids)
	if [[ -n "$SUITE_PID" ]] && kill -0 "$SUITE_PID" 2>/dev/null; then
		kill -TERM "$SUITE_PID" 2>/dev/null
		local deadline=$((SECONDS + 60))
		while kill -0 "$SUITE_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
	fi
	[[ -z "$SUITE_PID" ]] || { kill -KILL "$SUITE_PID" 2>/dev/null; wait "$SUITE_PID" 2>/dev/null; }
	# The suite stops its kubelet when it ends; one it left behind is stopped here.
	want="$(readlink -f "$NE2E_BIN_DIR/kubelet")"
	for p in "${left[@]}"; do
		[[ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" == "$want" ]] || continue
		ne2e_log "the suite left kubelet pid $p running: killing it"
		kill -KILL "$p" 2>/dev/null
	done
	if ((CONTAINERD_STARTED)); then
		cp -f "/run/kubelet-rs/$NE2E_INSTANCE/containerd.log" "$NE2E_ARTIFACTS/containerd.log" 2>/dev/null
		"$TESTBED/containerd.sh" purge "$NE2E_INSTANCE" 2>>"$NE2E_ARTIFACTS/containerd-stop.log" ||
			ne2e_log "containerd.sh purge $NE2E_INSTANCE failed; see $NE2E_ARTIFACTS/containerd-stop.log"
	fi
	local c
	e2e_unmount_under /var/lib/kubelet
	e2e_unmount_under "$NE2E_WORK"
	for c in "${NE2E_CGROUPS[@]}"; do e2e_remove_cgroup "$c"; done
	ne2e_log "bed down"
	exit "$rc"
}

main() {
	local v
	for v in NE2E_ARTIFACTS NE2E_KUBECTL NE2E_IMAGE_LISTS NE2E_SUITE_BIN; do
		[[ -n "${!v:-}" ]] || ne2e_die "$v not set: inside.sh is started by e2e/node-e2e/run.sh"
	done
	trap cleanup EXIT
	trap 'exit 143' TERM
	privatize
	export PATH="$HERE/shims:$PATH"
	export KRS_NET_INDEX="$NE2E_NET_INDEX"
	CONTAINERD_STARTED=1
	"$TESTBED/containerd.sh" start "$NE2E_INSTANCE" >/dev/null
	eval "$("$TESTBED/containerd.sh" env "$NE2E_INSTANCE")"
	ne2e_log "containerd $NE2E_INSTANCE runs; importing the images"
	import_images
	mkdir -p "$NE2E_SUITE_DIR"
	"$HERE/config-agent.sh" >>"$NE2E_ARTIFACTS/config-agent.log" 2>&1 &
	AGENT_PID=$!
	ne2e_log "running e2e_node.test (log $NE2E_ARTIFACTS/suite.log)"
	cd "$NE2E_SUITE_DIR"
	"$NE2E_SUITE_BIN" "$@" \
		--container-runtime-endpoint="$CONTAINER_RUNTIME_ENDPOINT" \
		--image-service-endpoint="$IMAGE_SERVICE_ENDPOINT" \
		</dev/null >"$NE2E_ARTIFACTS/suite.log" 2>&1 &
	SUITE_PID=$!
	echo "$SUITE_PID" >"$NE2E_SUITE_PID_FILE"
	local rc=0
	wait "$SUITE_PID" || rc=$?
	SUITE_PID=""
	ne2e_log "e2e_node.test exited with status $rc"
	return "$rc"
}

main "$@"
