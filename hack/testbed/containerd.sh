#!/usr/bin/env bash
# Usage: hack/testbed/containerd.sh {start|stop|status|env|purge} [INSTANCE]
#
# A containerd of our own, beside any other runtime on the machine: its socket, state, config,
# log and pid file live in /run/kubelet-rs/INSTANCE/, its content and snapshots in
# /var/lib/kubelet-rs/INSTANCE/containerd. INSTANCE defaults to "krs".
#
#   start   start it in the background (nothing to do if it already runs), then print `env`
#   stop    kill its containers, stop it, clean up its runc state and mounts
#   status  say whether it runs (exit 0) or not (exit 1)
#   env     print shell exports: KRS_CONTAINERD_SOCK, KRS_CONTAINERD_ROOT,
#           CONTAINER_RUNTIME_ENDPOINT and a few more
#   purge   stop, then delete its state and root (images included)
#
# KRS_CONTAINERD_SYSTEMD_CGROUP=1 makes runc use systemd for cgroups (SystemdCgroup = true), for
# a kubelet with the systemd cgroup driver; it needs a systemd, see systemd-node.sh.
#
# start also puts the node's network guards in place (the test bed's network rules): a blackhole
# route for the service CIDR and an iptables FORWARD rule that drops pod traffic leaving the
# instance's pod subnet. Registries are pinned to a closed local port, so a pull of an image
# that was not imported fails at once without leaving the machine.
set -euo pipefail

# shellcheck source=hack/testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

START_TIMEOUT_S=30
STOP_TIMEOUT_S=15
CTR_TIMEOUT_S=10

# Every registry a test may name. Pulls from these go to 127.0.0.1:1 and fail immediately.
# KRS_EXTRA_REGISTRIES (space separated) adds more.
REGISTRIES=(
	docker.io registry-1.docker.io index.docker.io
	registry.k8s.io k8s.gcr.io staging-k8s.gcr.io invalid.registry.k8s.io
	gcr.io us.gcr.io eu.gcr.io asia.gcr.io mirror.gcr.io
	us-docker.pkg.dev europe-docker.pkg.dev
	quay.io ghcr.io mcr.microsoft.com public.ecr.aws registry.gitlab.com nvcr.io
	registry.access.redhat.com registry.fedoraproject.org docker.elastic.co
	invalid.com e2e.registry.invalid
)
CLOSED_PORT_URL="http://127.0.0.1:1"

usage() { echo "usage: $0 {start|stop|status|env|purge} [INSTANCE]" >&2; }

ctr_() { timeout "$CTR_TIMEOUT_S" ctr --address "$KRS_I_SOCK" "$@"; }

print_env() {
	local endpoint="unix://$KRS_I_SOCK"
	printf 'export KRS_CONTAINERD_INSTANCE=%q\n' "$KRS_I_NAME"
	printf 'export KRS_CONTAINERD_SOCK=%q\n' "$KRS_I_SOCK"
	printf 'export KRS_CONTAINERD_ROOT=%q\n' "$KRS_I_ROOT"
	printf 'export KRS_CONTAINERD_STATE=%q\n' "$KRS_I_STATE"
	printf 'export KRS_CONTAINERD_NAMESPACE=%q\n' "k8s.io"
	printf 'export KRS_RUNC_ROOT=%q\n' "$KRS_I_RUNC_ROOT/k8s.io"
	printf 'export KRS_POD_SUBNET=%q\n' "$KRS_I_POD_SUBNET"
	printf 'export KRS_CNI_BRIDGE=%q\n' "$KRS_I_BRIDGE"
	printf 'export KRS_SANDBOX_IMAGE=%q\n' "$KRS_SANDBOX_IMAGE"
	printf 'export CONTAINER_RUNTIME_ENDPOINT=%q\n' "$endpoint"
	printf 'export IMAGE_SERVICE_ENDPOINT=%q\n' "$endpoint"
}

# write_file PATH < CONTENT: replaces PATH atomically, and only when the content changed,
# because containerd watches the CNI folder and reloads (or fails on a half-written file).
write_file() {
	local path="$1" tmp
	tmp="$(dirname "$path")/.$(basename "$path").tmp"
	cat >"$tmp"
	if cmp -s "$tmp" "$path"; then
		rm -f "$tmp"
	else
		mv -f "$tmp" "$path"
	fi
}

# render_config: the daemon's config file on stdout.
render_config() {
	# runc puts containers in systemd scopes when the kubelet uses the systemd cgroup driver.
	local systemd_cgroup=false
	[[ "${KRS_CONTAINERD_SYSTEMD_CGROUP:-}" == 1 ]] && systemd_cgroup=true
	cat <<EOF
# Written by hack/testbed/containerd.sh for instance $KRS_I_NAME; rewritten on every start.
version = 2
root = "$KRS_I_ROOT"
state = "$KRS_I_CD_STATE"
oom_score = 0
required_plugins = ["io.containerd.grpc.v1.cri"]
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$KRS_I_SOCK"
  tcp_address = ""

[ttrpc]
  address = "$KRS_I_SOCK.ttrpc"

# Unix socket only: no TCP listener beyond the CRI stream server on loopback.
[debug]
  address = "$KRS_I_STATE/debug.sock"
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$KRS_I_ROOT/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$KRS_SANDBOX_IMAGE"
    # This machine cannot lower oom_score_adj; without this no sandbox starts.
    restrict_oom_score_adj = true
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # Keeps pod network namespaces in our state dir instead of the shared /var/run/netns.
    netns_mounts_under_state_dir = true

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = $systemd_cgroup
          Root = "$KRS_I_RUNC_ROOT"

      # A second handler, runc under another name, so a RuntimeClass can point at a handler
      # that exists (tests/runtime_class.rs); a class naming any other handler fails
      # RunPodSandbox.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.krs-test]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.krs-test.options]
          SystemdCgroup = $systemd_cgroup
          Root = "$KRS_I_RUNC_ROOT"

      # The handler upstream's e2e RuntimeClass specs expect on a non-docker runtime
      # (framework.PreconfiguredRuntimeClassHandler: "test-handler"), runc as well.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
          SystemdCgroup = $systemd_cgroup
          Root = "$KRS_I_RUNC_ROOT"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$KRS_I_CNI_CONF_DIR"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$KRS_I_HOSTS_DIR"
EOF
}

write_cni_config() {
	mkdir -p "$KRS_I_CNI_CONF_DIR" "$KRS_I_CNI_IPAM_DIR"
	# Only our file may be there: containerd loads the first conflist it finds.
	find "$KRS_I_CNI_CONF_DIR" -mindepth 1 -maxdepth 1 ! -name 10-kubelet-rs.conflist -delete
	write_file "$KRS_I_CNI_CONF_DIR/10-kubelet-rs.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kubelet-rs-$KRS_I_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$KRS_I_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$KRS_I_CNI_IPAM_DIR",
        "ranges": [[{ "subnet": "$KRS_I_POD_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
}

write_hosts_dir() {
	local extra=() registry dir
	read -r -a extra <<<"${KRS_EXTRA_REGISTRIES:-}"
	for registry in "${REGISTRIES[@]}" "${extra[@]}"; do
		dir="$KRS_I_HOSTS_DIR/$registry"
		mkdir -p "$dir"
		write_file "$dir/hosts.toml" <<EOF
# Nothing listens on port 1: pulls of images that were not imported fail at once, locally.
server = "$CLOSED_PORT_URL"

[host."$CLOSED_PORT_URL"]
  capabilities = ["pull", "resolve"]
EOF
	done
}

# Another running instance with the same pod subnet would share our bridge and IPAM range.
check_subnet_free() {
	local conf other
	for conf in /run/kubelet-rs/*/cni/net.d/10-kubelet-rs.conflist; do
		[[ -e "$conf" ]] || continue
		other="$(basename "$(dirname "$(dirname "$(dirname "$conf")")")")"
		[[ "$other" == "$KRS_I_NAME" ]] && continue
		if grep -q "\"subnet\": \"$KRS_I_POD_SUBNET\"" "$conf" &&
			krs_running_pid "/run/kubelet-rs/$other/containerd.pid" \
				"/run/kubelet-rs/$other/config.toml" >/dev/null; then
			krs_die "instance $other already uses $KRS_I_POD_SUBNET; set KRS_NET_INDEX to another 1..254"
		fi
	done
}

apply_network_guards() {
	ip route replace blackhole "$KRS_SERVICE_CIDR"
	local rule=(FORWARD -s "$KRS_I_POD_SUBNET" ! -d "$KRS_I_POD_SUBNET"
		-m comment --comment "kubelet-rs $KRS_I_NAME: pod traffic stays on the pod network" -j DROP)
	# Inserted first so that an ACCEPT added by someone else cannot shadow it.
	if ! iptables -w 5 -C "${rule[@]}" 2>/dev/null; then
		iptables -w 5 -I "${rule[@]}"
	fi
}

wait_ready() {
	local pid="$1" deadline=$((SECONDS + START_TIMEOUT_S))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 30 "$KRS_I_LOG" >&2 || true
			krs_die "containerd exited during start; log: $KRS_I_LOG"
		fi
		if [[ -S "$KRS_I_SOCK" ]] && ctr_ version >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	tail -n 30 "$KRS_I_LOG" >&2 || true
	krs_die "containerd not ready after ${START_TIMEOUT_S}s; log: $KRS_I_LOG"
}

cmd_start() {
	krs_require_root
	local pid
	if pid="$(krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG")"; then
		# A daemon left from an older checkout must not serve tests with a stale config.
		if [[ "$(render_config)" == "$(<"$KRS_I_CONFIG")" ]]; then
			krs_log "containerd $KRS_I_NAME already running (pid $pid)"
			# Cheap and idempotent; puts back a guard that someone removed meanwhile.
			apply_network_guards
			write_cni_config
			write_hosts_dir
			print_env
			return 0
		fi
		krs_log "containerd $KRS_I_NAME runs with an outdated config: restarting it"
		cmd_stop
	fi
	command -v containerd >/dev/null || krs_die "containerd missing: run hack/testbed/install.sh"
	# A socket that answers without our pid file belongs to someone else: leave it alone.
	if [[ -S "$KRS_I_SOCK" ]] && ctr_ version >/dev/null 2>&1; then
		krs_die "$KRS_I_SOCK is served by a containerd we did not start"
	fi
	# Leftovers of a crashed run (runc state, mounts) would confuse the new daemon.
	sweep
	mkdir -p "$KRS_I_STATE" "$KRS_I_ROOT" "$KRS_I_CD_STATE" "$KRS_I_RUNC_ROOT"
	chmod 0711 "$KRS_I_STATE"
	check_subnet_free
	render_config | write_file "$KRS_I_CONFIG"
	write_cni_config
	write_hosts_dir
	apply_network_guards

	# /run is memory: keep one previous log, not every run's.
	if [[ -f "$KRS_I_LOG" ]] && (($(stat -c %s "$KRS_I_LOG") > 10 * 1024 * 1024)); then
		mv -f "$KRS_I_LOG" "$KRS_I_LOG.1"
	fi
	krs_log "starting containerd $KRS_I_NAME (log $KRS_I_LOG)"
	# setsid: a Ctrl-C aimed at the calling script must not kill the daemon behind its back.
	setsid containerd --config "$KRS_I_CONFIG" </dev/null >>"$KRS_I_LOG" 2>&1 &
	pid=$!
	echo "$pid" >"$KRS_I_PIDFILE"
	wait_ready "$pid"
	krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG" >/dev/null ||
		krs_die "pid $pid is not the containerd we started"
	krs_log "containerd $KRS_I_NAME ready (pid $pid, socket $KRS_I_SOCK)"
	print_env
}

# Kills every task through containerd itself, so it tears down shims and rootfs mounts.
kill_tasks() {
	local ns task
	for ns in $(ctr_ namespaces ls -q 2>/dev/null); do
		for task in $(ctr_ -n "$ns" tasks ls -q 2>/dev/null); do
			ctr_ -n "$ns" tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
		done
		for task in $(ctr_ -n "$ns" tasks ls -q 2>/dev/null); do
			ctr_ -n "$ns" tasks rm -f "$task" >/dev/null 2>&1 || true
		done
	done
}

# Pids of shims started by our daemon: they carry our socket in their -address argument.
our_shim_pids() {
	local proc pid args i
	for proc in /proc/[0-9]*; do
		pid="${proc#/proc/}"
		{ mapfile -d '' -t args <"$proc/cmdline"; } 2>/dev/null || continue
		[[ ${#args[@]} -gt 0 && "$(basename "${args[0]}")" == containerd-shim* ]] || continue
		for ((i = 0; i + 1 < ${#args[@]}; i++)); do
			if [[ "${args[i]}" == "-address" && "${args[i + 1]}" == "$KRS_I_SOCK" ]]; then
				printf '%s\n' "$pid"
				break
			fi
		done
	done
}

# Mount points under our state and root folders, deepest first.
our_mounts() {
	local prefix
	awk '{ print $5 }' /proc/self/mountinfo | while read -r mnt; do
		# mountinfo writes blanks as octal escapes (\040).
		mnt="$(printf '%b' "$mnt")"
		for prefix in "$KRS_I_STATE/" "$KRS_I_ROOT/"; do
			if [[ "$mnt/" == "$prefix"* ]]; then
				printf '%s\n' "$mnt"
			fi
		done
	done | sort -r -u
}

# Cleans what a dead daemon may have left: runc containers of our runc root, our shims, our
# mounts, our IPAM leases. Touches nothing outside this instance's folders and processes.
sweep() {
	local nsdir id pid mnt
	if command -v runc >/dev/null && [[ -d "$KRS_I_RUNC_ROOT" ]]; then
		for nsdir in "$KRS_I_RUNC_ROOT"/*/; do
			[[ -d "$nsdir" ]] || continue
			for id in $(runc --root "$nsdir" list -q 2>/dev/null); do
				runc --root "$nsdir" kill --all "$id" KILL >/dev/null 2>&1 || true
				runc --root "$nsdir" delete -f "$id" >/dev/null 2>&1 || true
			done
		done
	fi
	for pid in $(our_shim_pids); do
		kill -KILL "$pid" 2>/dev/null || true
	done
	while read -r mnt; do
		[[ -n "$mnt" ]] || continue
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null ||
			krs_log "warning: cannot unmount $mnt"
	done < <(our_mounts)
	# Every pod is gone, so every address lease is stale.
	if [[ -d "$KRS_I_CNI_IPAM_DIR" ]]; then
		find "$KRS_I_CNI_IPAM_DIR" -mindepth 1 -delete
	fi
	rm -f "$KRS_I_PIDFILE" "$KRS_I_SOCK" "$KRS_I_SOCK.ttrpc" "$KRS_I_STATE/debug.sock"
}

cmd_stop() {
	krs_require_root
	local pid deadline
	if pid="$(krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG")"; then
		krs_log "stopping containerd $KRS_I_NAME (pid $pid)"
		kill_tasks
		kill -TERM "$pid" 2>/dev/null || true
		deadline=$((SECONDS + STOP_TIMEOUT_S))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			krs_log "containerd $KRS_I_NAME ignored SIGTERM, killing it"
			kill -KILL "$pid" 2>/dev/null || true
			while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
		fi
	else
		krs_log "containerd $KRS_I_NAME not running"
	fi
	sweep
	krs_log "containerd $KRS_I_NAME stopped"
}

cmd_status() {
	local pid
	if pid="$(krs_running_pid "$KRS_I_PIDFILE" "$KRS_I_CONFIG")"; then
		echo "containerd $KRS_I_NAME running: pid $pid, socket $KRS_I_SOCK"
		return 0
	fi
	echo "containerd $KRS_I_NAME stopped"
	return 1
}

cmd_purge() {
	cmd_stop
	if [[ -n "$(our_mounts)" ]]; then
		krs_die "mounts remain under $KRS_I_STATE or $KRS_I_ROOT; not deleting"
	fi
	rm -rf --one-file-system "$KRS_I_STATE" "$KRS_I_ROOT"
	krs_log "containerd $KRS_I_NAME purged"
}

main() {
	if [[ $# -lt 1 || $# -gt 2 ]]; then
		usage
		exit 2
	fi
	krs_instance_vars "${2:-$KRS_DEFAULT_INSTANCE}"
	case "$1" in
	start) cmd_start ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	env) print_env ;;
	purge) cmd_purge ;;
	-h | --help | help) usage ;;
	*)
		usage
		exit 2
		;;
	esac
}

main "$@"
