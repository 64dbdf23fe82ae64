#!/usr/bin/env bash
# Usage: hack/testbed/systemd-node.sh {start|stop|pid|exec} NAME [COMMAND...]
#
# A real systemd (the machine's /lib/systemd/systemd) as PID 1 of its own PID and mount
# namespace, for testing what talks to systemd: the systemd cgroup driver (transient slices
# over D-Bus) and graceful node shutdown (logind inhibitor locks and PrepareForShutdown).
# PID 1 of these machines is not systemd, so this is how a test gets one.
#
#   start  boot it (nothing to do if NAME already runs); it runs D-Bus (dbus-daemon) and
#          systemd-logind, and nothing else; prints its pid
#   stop   power it off (SIGRTMIN+4), kill what is left, remove its cgroups
#   pid    print the pid of its systemd (exit 1 when it does not run)
#   exec   run COMMAND inside it (its /run, its /proc, systemd as PID 1)
#
# What it shares with the machine: the network, the filesystem except /run and
# /etc/systemd/logind.conf.d (both private tmpfs), and the cgroup hierarchies, where it lives
# in its own subtree krs-sd-NAME (so its slices are /sys/fs/cgroup/<ctrl>/krs-sd-NAME/...).
# It starts only the units written below (no tmpfiles, no journald, no udev): a full boot
# would clean the machine's /tmp and start services meant for the machine.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SYSTEMD=/lib/systemd/systemd
BOOT_TIMEOUT_S=30
STOP_TIMEOUT_S=15

usage() { echo "usage: $0 {start|stop|pid|exec} NAME [COMMAND...]" >&2; }

node_vars() {
	local name="$1"
	[[ "$name" =~ ^[a-z0-9][a-z0-9-]{0,19}$ ]] || krs_die "node name '$name' must match [a-z0-9][a-z0-9-]{0,19}"
	NODE_DIR="/var/lib/kubelet-rs/systemd-nodes/$name"
	NODE_UNITS="$NODE_DIR/units"
	NODE_PIDFILE="$NODE_DIR/systemd.pid"
	NODE_LOG="$NODE_DIR/systemd.log"
	NODE_CGROUP="krs-sd-$name"
}

# Prints the pid of the node's systemd if it runs.
node_pid() {
	[[ -r "$NODE_PIDFILE" ]] || return 1
	local pid
	pid="$(<"$NODE_PIDFILE")"
	# A recycled pid may be another node's systemd: ours lives in its own cgroup subtree.
	[[ "$pid" =~ ^[0-9]+$ ]] && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == systemd ]] &&
		grep -qE ":/$NODE_CGROUP(/|\$)" "/proc/$pid/cgroup" 2>/dev/null || return 1
	printf '%s\n' "$pid"
}

write_units() {
	rm -rf "$NODE_UNITS"
	mkdir -p "$NODE_UNITS"
	# Units without default dependencies need no sysinit/basic targets; output goes to the
	# console (our log file) because there is no journald.
	cat >"$NODE_UNITS/krs-node.target" <<-'UNIT'
		[Unit]
		Description=kubelet-rs test node
		Wants=dbus.socket dbus.service systemd-logind.service
	UNIT
	cat >"$NODE_UNITS/system.slice" <<-'UNIT'
		[Unit]
		Description=System Slice
		DefaultDependencies=no
	UNIT
	cat >"$NODE_UNITS/dbus.socket" <<-'UNIT'
		[Unit]
		Description=D-Bus System Message Bus Socket
		DefaultDependencies=no
		[Socket]
		ListenStream=/run/dbus/system_bus_socket
	UNIT
	cat >"$NODE_UNITS/dbus.service" <<-'UNIT'
		[Unit]
		Description=D-Bus System Message Bus
		DefaultDependencies=no
		Requires=dbus.socket
		[Service]
		ExecStart=/usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile --systemd-activation --syslog-only
		ExecReload=/usr/bin/dbus-send --print-reply --system --type=method_call --dest=org.freedesktop.DBus / org.freedesktop.DBus.ReloadConfig
		StandardOutput=inherit
		StandardError=inherit
	UNIT
	cat >"$NODE_UNITS/systemd-logind.service" <<-'UNIT'
		[Unit]
		Description=User Login Management
		DefaultDependencies=no
		Wants=dbus.socket
		After=dbus.socket
		[Service]
		Type=notify
		BusName=org.freedesktop.login1
		ExecStart=/lib/systemd/systemd-logind
		Restart=always
		RestartSec=0
		StandardOutput=inherit
		StandardError=inherit
	UNIT
}

cgroup_dirs() {
	local d
	for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[[ -e "$d/cgroup.procs" ]] || continue
		printf '%s\n' "${d%/}/$NODE_CGROUP"
	done
}

remove_cgroups() {
	local d pid
	for d in $(cgroup_dirs); do
		[[ -d "$d" ]] || continue
		for pid in $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null || true
		done
	done
	sleep 0.2
	for d in $(cgroup_dirs); do
		[[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ -d "$d" ]] && krs_log "warning: could not remove cgroup $d"
	done
	return 0
}

boot() {
	# Runs as PID 1 of the new namespaces (see start): its own cgroup subtree, /proc, /run.
	local d
	for d in $(cgroup_dirs); do
		mkdir -p "$d"
		# A new v1 cpuset cgroup has no cpus or memory nodes, and nothing may join it then.
		if [[ -e "$d/cpuset.cpus" && -z "$(<"$d/cpuset.cpus")" ]]; then
			cat "$d/../cpuset.cpus" >"$d/cpuset.cpus"
			cat "$d/../cpuset.mems" >"$d/cpuset.mems"
		fi
		echo $$ >"$d/cgroup.procs"
	done
	mount -t proc proc /proc
	mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
	mkdir -p /run/lock /etc/systemd/logind.conf.d
	mount -t tmpfs -o mode=755 tmpfs /etc/systemd/logind.conf.d
	exec env -i container=kubelet-rs-test SYSTEMD_UNIT_PATH="$NODE_UNITS" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		"$SYSTEMD" --system --unit=krs-node.target --log-target=console --log-level=info \
		--default-standard-output=inherit --default-standard-error=inherit
}

start() {
	krs_require_root
	[[ -x "$SYSTEMD" ]] || krs_die "$SYSTEMD is missing (Debian package systemd)"
	if pid="$(node_pid)"; then
		printf '%s\n' "$pid"
		return
	fi
	remove_cgroups
	mkdir -p "$NODE_DIR"
	write_units
	: >"$NODE_LOG"
	# slave: the machine's later mounts reach the node, the node's mounts stay in it.
	setsid unshare --pid --mount --fork --propagation slave \
		bash "$0" __boot "$NAME" >>"$NODE_LOG" 2>&1 </dev/null &
	local unshare_pid=$! deadline=$((SECONDS + BOOT_TIMEOUT_S)) pid=""
	while ((SECONDS < deadline)); do
		pid="$(pgrep -P "$unshare_pid" -x systemd || true)"
		if [[ -n "$pid" && -S "/proc/$pid/root/run/dbus/system_bus_socket" ]] &&
			nsenter -t "$pid" -m -p -- busctl --system status org.freedesktop.login1 >/dev/null 2>&1; then
			echo "$pid" >"$NODE_PIDFILE"
			krs_log "systemd node $NAME up (pid $pid, cgroup $NODE_CGROUP)"
			printf '%s\n' "$pid"
			return
		fi
		sleep 0.2
	done
	krs_log "systemd node $NAME did not come up; its log:"
	tail -n 40 "$NODE_LOG" >&2
	[[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
	remove_cgroups
	exit 1
}

stop() {
	local pid
	if pid="$(node_pid)"; then
		kill -s RTMIN+4 "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + STOP_TIMEOUT_S))
		while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
		kill -9 "$pid" 2>/dev/null || true
		deadline=$((SECONDS + STOP_TIMEOUT_S))
		while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			krs_log "warning: systemd node $NAME (pid $pid) still there after SIGKILL"
		fi
	fi
	rm -f "$NODE_PIDFILE"
	remove_cgroups
}

[[ $# -ge 2 ]] || {
	usage
	exit 2
}
CMD="$1" NAME="$2"
shift 2
node_vars "$NAME"
case "$CMD" in
start) start ;;
stop) stop ;;
pid) node_pid ;;
exec)
	pid="$(node_pid)" || krs_die "systemd node $NAME is not running"
	exec nsenter -t "$pid" -m -p -- "$@"
	;;
__boot) boot ;;
*)
	usage
	exit 2
	;;
esac
