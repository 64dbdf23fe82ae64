#!/usr/bin/env bash
# Usage: e2e/kubeadm/kubelet-service.sh KUBELET LOG   (started by e2e/kubeadm/node.sh, in the node)
#
# Plays systemd's part for the kubelet on the kubeadm node, where PID 1 is not systemd: this loop
# is kubelet.service with kubeadm's drop-in, and e2e/kubeadm/systemctl (first on the node's PATH)
# is the `systemctl` kubeadm calls to stop, start and restart it (kubelet-start and
# kubelet-finalize phases of init, reset), so kubeadm drives the kubelet as it does on a systemd
# host. The drop-in the kubeadm Debian/RPM package installs
# (/etc/systemd/system/kubelet.service.d/10-kubeadm.conf, v1.20):
#
#   [Service]
#   Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
#   Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
#   EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
#   EnvironmentFile=-/etc/default/kubelet
#   ExecStart=
#   ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
#
# and kubelet.service (enabled) has Restart=always, StartLimitInterval=0, RestartSec=10.
#
# As there:
#   - the unit is enabled and started at once: until `kubeadm init` writes
#     /var/lib/kubelet/config.yaml the kubelet exits (no config file) and is restarted every
#     RestartSec, until kubeadm stops it, writes its files and restarts it;
#   - the environment files are read at every start as systemd reads them (KEY=value, quotes
#     removed; a missing file is no error) and the $VARS split on blanks without globbing;
#   - Restart=always with RestartSec=$KRS_KUBEADM_RESTART_SEC (default 10, the unit's); a start
#     or restart request during RestartSec starts the kubelet at once;
#   - stop: SIGTERM, then SIGKILL after 30 s (systemd's TimeoutStopSec is 90 s).
# Control: e2e/kubeadm/systemctl writes start, restart or stop into /run/krs-kubelet-service/request,
# which the loop polls five times a second (signals were lost when they came right after a stop);
# SIGTERM stops the kubelet and ends the loop. The state, "active PID" or "inactive", is in
# /run/krs-kubelet-service/state (the node's private /run). KUBELET is the binary (ours or
# upstream's; on a real node /usr/bin/kubelet). Each start is logged in LOG with its command line,
# followed by the kubelet's output.
set -euo pipefail

KUBELET="$1"
LOG="$2"
RESTART_SEC="${KRS_KUBEADM_RESTART_SEC:-10}"
STOP_TIMEOUT_S=30
CONFIG=/var/lib/kubelet/config.yaml
FLAGS_ENV=/var/lib/kubelet/kubeadm-flags.env
DEFAULTS_ENV=/etc/default/kubelet
RUN_DIR=/run/krs-kubelet-service
KUBELET_PID=""
WANT=1
EXITING=0
# Set by a request: pause looks at it.
WOKEN=0

slog() { printf '[kubelet.service %(%H:%M:%S)T] %s\n' -1 "$*" >>"$LOG"; }

set_state() { printf '%s\n' "$*" >"$RUN_DIR/state.tmp" && mv -f "$RUN_DIR/state.tmp" "$RUN_DIR/state"; }

# env_value FILE KEY: KEY's value in a systemd EnvironmentFile (the last assignment wins); empty
# when the file or the key is missing (the "-" of EnvironmentFile=-...).
env_value() {
	local file="$1" key="$2" line value=""
	[[ -r "$file" ]] || return 0
	while IFS= read -r line || [[ -n "$line" ]]; do
		line="${line#"${line%%[![:space:]]*}"}"
		[[ -z "$line" || "$line" == \#* || "$line" == \;* ]] && continue
		[[ "$line" == "$key="* ]] || continue
		value="${line#"$key="}"
		if [[ "$value" == \"*\" || "$value" == \'*\' ]]; then
			value="${value:1:${#value}-2}"
		fi
	done <"$file"
	printf '%s' "$value"
}

start_kubelet() {
	local kubeconfig_args config_args kubeadm_args extra_args args
	kubeconfig_args="--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
	config_args="--config=$CONFIG"
	kubeadm_args="$(env_value "$FLAGS_ENV" KUBELET_KUBEADM_ARGS)"
	extra_args="$(env_value "$DEFAULTS_ENV" KUBELET_EXTRA_ARGS)"
	# Split on blanks, never globbed: systemd's $VAR expansion in ExecStart.
	set -f
	# shellcheck disable=SC2206 # word splitting is the point
	args=($kubeconfig_args $config_args $kubeadm_args $extra_args)
	set +f
	slog "starting: $KUBELET ${args[*]}"
	"$KUBELET" "${args[@]}" </dev/null >>"$LOG" 2>&1 &
	KUBELET_PID=$!
	set_state "active $KUBELET_PID"
}

stop_kubelet() {
	if [[ -n "$KUBELET_PID" ]] && kill -0 "$KUBELET_PID" 2>/dev/null; then
		slog "stopping the kubelet (pid $KUBELET_PID)"
		kill -TERM "$KUBELET_PID" 2>/dev/null || true
		local deadline=$((SECONDS + STOP_TIMEOUT_S))
		while kill -0 "$KUBELET_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
		if kill -0 "$KUBELET_PID" 2>/dev/null; then
			slog "the kubelet ignored SIGTERM for ${STOP_TIMEOUT_S}s: SIGKILL"
			kill -KILL "$KUBELET_PID" 2>/dev/null || true
		fi
		wait "$KUBELET_PID" 2>/dev/null || true
	fi
	KUBELET_PID=""
	set_state inactive
}

on_start() {
	slog "start requested"
	WANT=1
	WOKEN=1
}
on_restart() {
	slog "restart requested"
	stop_kubelet
	WANT=1
	WOKEN=1
}
on_stop() {
	slog "stop requested"
	WANT=0
	stop_kubelet
	WOKEN=1
}
on_exit() {
	WANT=0
	EXITING=1
	stop_kubelet
	# The node shares the machine's pids: a stale pid file could aim systemctl at a stranger.
	rm -f "$RUN_DIR/pid"
	slog "service loop ends"
	exit 0
}

# take_request: does what systemctl asked, if it asked anything; true if it did.
take_request() {
	local verb
	verb="$(cat "$RUN_DIR/request" 2>/dev/null)" || return 1
	rm -f "$RUN_DIR/request"
	case "$verb" in
	start) on_start ;;
	restart) on_restart ;;
	stop) on_stop ;;
	*) slog "unknown request: $verb" ;;
	esac
}

# nap: 0.2 s, cut short by SIGTERM.
nap() {
	sleep 0.2 &
	wait $! 2>/dev/null || true
}

# pause SECONDS: sleeps, but a request ends it at once.
pause() {
	WOKEN=0
	local deadline=$((SECONDS + $1))
	while ((!WOKEN && SECONDS < deadline)); do
		take_request || nap
	done
}

main() {
	mkdir -p "$RUN_DIR"
	echo $$ >"$RUN_DIR/pid"
	set_state inactive
	trap on_exit TERM INT
	slog "kubelet.service enabled: starting (Restart=always, RestartSec=${RESTART_SEC}s)"
	local rc pid
	while ((!EXITING)); do
		if ((!WANT)); then
			pause 3600
			continue
		fi
		[[ -n "$KUBELET_PID" ]] || start_kubelet
		pid="$KUBELET_PID"
		# Until the kubelet exits, or a request stopped or replaced it.
		while kill -0 "$pid" 2>/dev/null && ((!EXITING)); do
			take_request && break
			nap
		done
		if kill -0 "$pid" 2>/dev/null; then
			continue
		fi
		rc=0
		wait "$pid" 2>/dev/null || rc=$?
		[[ "$KUBELET_PID" == "$pid" ]] || continue
		slog "the kubelet exited with status $rc; restarting in ${RESTART_SEC}s (Restart=always)"
		KUBELET_PID=""
		set_state "activating (auto-restart)"
		pause "$RESTART_SEC"
	done
}

main "$@"
