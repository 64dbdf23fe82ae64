#!/usr/bin/env bash
# Usage: e2e/kubeadm/kubelet-service.sh KUBELET LOG   (started by e2e/kubeadm/node.sh, in the node)
#
# Plays systemd's part for the kubelet on the kubeadm node: PID 1 here is not systemd, so
# `systemctl restart kubelet` from kubeadm's kubelet-start phase fails (kubeadm only warns) and
# this loop does what kubelet.service with kubeadm's drop-in would do. The drop-in the kubeadm
# Debian/RPM package installs (/etc/systemd/system/kubelet.service.d/10-kubeadm.conf, v1.20):
#
#   [Service]
#   Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
#   Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
#   EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
#   EnvironmentFile=-/etc/default/kubelet
#   ExecStart=
#   ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
#
# and kubelet.service has Restart=always, StartLimitInterval=0, RestartSec=10.
#
# Here:
#   - the kubelet starts once kubeadm has written /var/lib/kubelet/config.yaml and
#     kubeadm-flags.env (polled every 0.2 s): the moment kubeadm's `systemctl restart kubelet`
#     would have started it (under systemd the unit crash-loops until then, every 10 s);
#   - the environment files are read as systemd reads them (KEY=value, quotes removed) at every
#     start, and the $VARS are split on blanks without globbing, as systemd's ExecStart does;
#   - Restart=always with RestartSec=$KRS_KUBEADM_RESTART_SEC (default 2 s rather than 10: the
#     test waits for it);
#   - SIGTERM (node.sh's `systemctl stop kubelet`) stops the kubelet (SIGTERM, then SIGKILL after
#     30 s, as systemd's default TimeoutStopSec=90 would, shorter) and ends the loop.
# KUBELET is the binary (ours or upstream's; on a real node /usr/bin/kubelet). Each start is logged
# in LOG with the command line, and appended with the kubelet's output.
set -euo pipefail

KUBELET="$1"
LOG="$2"
RESTART_SEC="${KRS_KUBEADM_RESTART_SEC:-2}"
STOP_TIMEOUT_S=30
CONFIG=/var/lib/kubelet/config.yaml
FLAGS_ENV=/var/lib/kubelet/kubeadm-flags.env
DEFAULTS_ENV=/etc/default/kubelet
KUBELET_PID=""
STOPPING=0

slog() { printf '[kubelet.service %(%H:%M:%S)T] %s\n' -1 "$*" >>"$LOG"; }

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

stop() {
	STOPPING=1
	if [[ -n "$KUBELET_PID" ]] && kill -0 "$KUBELET_PID" 2>/dev/null; then
		slog "stopping the kubelet (pid $KUBELET_PID)"
		kill -TERM "$KUBELET_PID" 2>/dev/null || true
		local deadline=$((SECONDS + STOP_TIMEOUT_S))
		while kill -0 "$KUBELET_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
		if kill -0 "$KUBELET_PID" 2>/dev/null; then
			slog "the kubelet ignored SIGTERM for ${STOP_TIMEOUT_S}s: SIGKILL"
			kill -KILL "$KUBELET_PID" 2>/dev/null || true
		fi
		wait "$KUBELET_PID" 2>/dev/null || true
	fi
	slog "stopped"
	exit 0
}

main() {
	trap stop TERM INT
	slog "waiting for kubeadm to write $CONFIG and $FLAGS_ENV"
	until [[ -s "$CONFIG" && -s "$FLAGS_ENV" ]]; do
		sleep 0.2 &
		wait $! || true
	done
	local kubeconfig_args config_args kubeadm_args extra_args args rc
	kubeconfig_args="--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
	config_args="--config=$CONFIG"
	while ((!STOPPING)); do
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
		rc=0
		wait "$KUBELET_PID" || rc=$?
		# A signal interrupts wait; the trap has then stopped the kubelet and exited.
		slog "the kubelet exited with status $rc; restarting in ${RESTART_SEC}s (Restart=always)"
		KUBELET_PID=""
		sleep "$RESTART_SEC" &
		wait $! || true
	done
}

main "$@"
