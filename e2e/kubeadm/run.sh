#!/usr/bin/env bash
# Usage: e2e/kubeadm/run.sh [--kubelet ours|upstream|both] [--artifacts DIR]
#        e2e/kubeadm/run.sh --down
#
# Makes kubeadm v1.20.2 the judge of a kubelet: on this machine, from nothing, in a node of its
# own (network, mount and UTS namespaces: e2e/kubeadm/lib.sh), `kubeadm init` with the kubelet
# started exactly as the kubeadm package's systemd drop-in starts it, kubeadm driving it through
# `systemctl` (e2e/kubeadm/kubelet-service.sh, e2e/kubeadm/systemctl), a CNI bridge config, the
# node Ready, a Deployment whose pod answers `kubectl logs` and `kubectl exec`, the mirror pods
# and every kube-system pod running, a kubelet crash that must leave every container running,
# then `kubeadm reset -f`; and the machine as it was (checked: the run fails if anything is
# left). e2e/kubeadm/node.sh lists every step and check; e2e/kubeadm/README.md what is ignored.
#
#   --kubelet ours      our kubelet (default): `cargo build --release`, or $KRS_KUBEADM_KUBELET
#   --kubelet upstream  the upstream kubelet v1.20.2 (hack/upstream/build.sh), the same way
#   --kubelet both      ours, then upstream's, and their timings side by side
#   --artifacts DIR     logs (default /var/tmp/kubelet-rs-kubeadm; one folder per kubelet)
#   --down              only take down what a killed run left
#
# Prints per kubelet: `kubeadm init` (start to success), init start to node Ready (the CNI config
# is installed right after init), init start to the Deployment's pod answering logs and exec,
# and the total (from the bare machine to the clean machine, images imported included).
# Exit status: 0 if every selected kubelet passed, 1 if not, 2 for usage errors.
#
# What it builds when missing: kubeadm, kube-apiserver, kube-controller-manager, kube-scheduler,
# kube-proxy, kubectl (and the kubelet for upstream) from Debian's kubernetes 1.20.2 source
# package (hack/upstream/build.sh, cached in /var/cache/kubelet-rs/upstream/bin); the images
# (e2e/kubeadm/images.sh); the CRI stubs of crictl.py; installs conntrack, socat and ethtool (the
# kubeadm package depends on them) if missing.
# Env: CARGO_TARGET_DIR (default /var/cache/kubelet-rs/target), KRS_KUBEADM_KUBELET (our kubelet
# binary: skips the cargo build), KRS_KUBEADM_KUBELET_EXTRA_ARGS (the node's
# /etc/default/kubelet KUBELET_EXTRA_ARGS, default empty), KRS_KUBEADM_RESTART_SEC (the unit's
# RestartSec, default 10).
set -euo pipefail

# The node has its own runtime at kubeadm's default socket. A shell that sourced the test bed's
# env (hack/test.sh does) exports the bed's CRI endpoints, which crictl would otherwise take
# over kubeadm's --runtime-endpoint for images.
unset CONTAINER_RUNTIME_ENDPOINT IMAGE_SERVICE_ENDPOINT

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
# shellcheck source=e2e/kubeadm/lib.sh
source "$HERE/lib.sh"
# shellcheck source=e2e/lib.sh
source "$KA_REPO/e2e/lib.sh"

# Preflight errors this machine causes, whatever the kubelet; each is ignored by name, and
# nothing else is. (Warnings, which kubeadm only prints, are not listed: no systemd means
# "kubelet service is not enabled" and the like.)
#   KubeletVersion  our kubelet reports the Kubernetes version whose API it implements
#                   (v1.34.0+kubelet-rs...), newer than the v1.20.2 control plane, and kubeadm
#                   v1.20 refuses a kubelet newer than the control plane. The upstream kubelet
#                   passes it; the list is the same for both kubelets so both runs are the same.
#   ImagePull       kubeadm's preflight looks for every image of `kubeadm config images list`,
#                   k8s.gcr.io/coredns:1.7.0 included even with the addon/coredns phase skipped,
#                   and no registry reachable here serves CoreDNS (see SKIP_PHASES). The other
#                   images are all imported before init (kubeadm logs "image exists" for each);
#                   one missing would still fail the run, at the static pod's start.
IGNORE_PREFLIGHT=(KubeletVersion ImagePull)
# No registry reachable here serves a CoreDNS image (Debian has no coredns package, and no crate
# or wheel builds it), so kubeadm's CoreDNS Deployment could never start. Nothing in the run
# needs cluster DNS.
SKIP_PHASES=(addon/coredns)

PACKAGES=(conntrack socat ethtool)
KIND="ours"
ARTIFACTS_ROOT="/var/tmp/kubelet-rs-kubeadm"
DOWN_ONLY=0
NODE_PID=""
declare -A RESULT=()

usage() { sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kubelet | --artifacts)
			[[ $# -ge 2 ]] || {
				usage >&2
				exit 2
			}
			[[ "$1" == --kubelet ]] && KIND="$2" || ARTIFACTS_ROOT="$2"
			shift 2
			;;
		--kubelet=*) KIND="${1#*=}" && shift ;;
		--artifacts=*) ARTIFACTS_ROOT="${1#*=}" && shift ;;
		--down) DOWN_ONLY=1 && shift ;;
		-h | --help)
			usage
			exit 0
			;;
		*)
			usage >&2
			exit 2
			;;
		esac
	done
	[[ "$KIND" =~ ^(ours|upstream|both)$ ]] || {
		usage >&2
		exit 2
	}
}

# --- building ----------------------------------------------------------------------------------

prepare() {
	local uses=(kubeadm) missing=() p
	[[ "$KIND" == ours ]] || uses+=(upstream)
	# kubeadm, kubectl and the control plane (hack/upstream/targets: kubeadm), the upstream kubelet.
	krs_upstream_ensure "${uses[@]}"
	"$KA_REPO/hack/testbed/install.sh" >&2
	missing=()
	for p in "${PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if ((${#missing[@]})); then
		ka_log "installing ${missing[*]} (the kubeadm package depends on them)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
	fi
	if [[ "$KIND" != upstream ]]; then
		if [[ -n "${KRS_KUBEADM_KUBELET:-}" ]]; then
			OURS_BIN="$(readlink -f "$KRS_KUBEADM_KUBELET")"
			[[ -x "$OURS_BIN" ]] || ka_die "KRS_KUBEADM_KUBELET=$KRS_KUBEADM_KUBELET is not executable"
		else
			export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
			ka_log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR; waits for another build's lock)"
			(cd "$KA_REPO" && nice -n 10 cargo build --release --bin kubelet) >&2
			OURS_BIN="$(this_checkouts_kubelet)" ||
				ka_die "no kubelet built from $KA_REPO in $CARGO_TARGET_DIR/release (another checkout's build replaced it?)"
		fi
	fi
	crictl_stubs
	mkdir -p "$ARTIFACTS_ROOT"
	IMAGES_LIST="$ARTIFACTS_ROOT/images.list"
	ka_log "building the images (e2e/kubeadm/images.sh)"
	"$HERE/images.sh" "$IMAGES_LIST" 2>"$ARTIFACTS_ROOT/images.log" || {
		tail -n 20 "$ARTIFACTS_ROOT/images.log" >&2
		ka_die "e2e/kubeadm/images.sh failed; log $ARTIFACTS_ROOT/images.log"
	}
}

# The kubelet cargo just built from this checkout, copied aside. Worktrees share
# CARGO_TARGET_DIR, and target/release/kubelet is whichever checkout's build finished last (a run
# here once took main's binary for ours): the copy must carry this checkout's path (the debug
# info's compilation folder), looked for in target/release/kubelet, then in deps/.
this_checkouts_kubelet() {
	local f copy="$ARTIFACTS_ROOT/kubelet-ours"
	mkdir -p "$ARTIFACTS_ROOT"
	for f in "$CARGO_TARGET_DIR/release/kubelet" $(ls -t "$CARGO_TARGET_DIR"/release/deps/kubelet-* 2>/dev/null); do
		[[ -f "$f" && -x "$f" ]] || continue
		cp -f "$f" "$copy.tmp"
		if grep -qaF -- "$KA_REPO" "$copy.tmp"; then
			mv -f "$copy.tmp" "$copy"
			printf '%s\n' "$copy"
			return 0
		fi
	done
	rm -f "$copy.tmp"
	return 1
}

# --- the node ------------------------------------------------------------------------------------

net_up() {
	ip netns add "$KA_NETNS"
	ip -n "$KA_NETNS" link set lo up
	# The node's address on eth0, one end of a veth pair whose other end stays in the node too
	# (this kernel has no dummy interfaces): a real interface, and no link to the machine.
	ip -n "$KA_NETNS" link add eth0 type veth peer name eth0-peer
	ip -n "$KA_NETNS" addr add "$KA_NODE_IP/$KA_NODE_PREFIX" dev eth0
	ip -n "$KA_NETNS" link set eth0-peer up
	ip -n "$KA_NETNS" link set eth0 up
}

# run_node KIND KUBELET: one kubeadm node from start to clean; sets RESULT[KIND,*].
run_node() {
	local kind="$1" kubelet="$2" dir="$ARTIFACTS_ROOT/$1" rc=0 start=$EPOCHREALTIME
	rm -rf "$dir"
	mkdir -p "$dir"
	ka_log "[$kind] kubelet $kubelet ($("$kubelet" --version 2>/dev/null | head -n1))"
	mkdir -p "$KA_STATE"
	rm -rf --one-file-system "$KA_DIR"
	mkdir -p "$KA_DIR"
	make_mount_points
	net_up
	bash -c "source '$KA_REPO/hack/testbed/lib.sh' && krs_ensure_cgroup_root '$KA_CGROUP'"
	ka_log "[$kind] starting the node (log $dir/node.log)"
	KA_KIND="$kind" KA_KUBELET_BIN="$kubelet" KA_ARTIFACTS="$dir" KA_IMAGES_LIST="$IMAGES_LIST" \
		KA_PY="$PY" KA_STUBS="$STUBS" KA_IGNORE_PREFLIGHT="$(
			IFS=,
			echo "${IGNORE_PREFLIGHT[*]}"
		)" KA_SKIP_PHASES="$(
			IFS=,
			echo "${SKIP_PHASES[*]}"
		)" \
		nsenter --net="/run/netns/$KA_NETNS" unshare --mount --uts --propagation private \
		bash "$HERE/node.sh" </dev/null > >(tee "$dir/node.log" | sed -u "s/^/  [$kind] /" >&2) 2>&1 9>&- &
	NODE_PID=$!
	echo "$NODE_PID" >"$KA_STATE/node.pid"
	wait "$NODE_PID" || rc=$?
	NODE_PID=""
	node_down || rc=1
	RESULT[$kind, verdict]="$(cat "$dir/verdict" 2>/dev/null || echo "node.sh exited with status $rc")"
	((rc == 0)) || [[ "${RESULT[$kind, verdict]}" != ok ]] || RESULT[$kind, verdict]="cleanup failed"
	record_timings "$kind" "$dir" "$start"
	return "$rc"
}

record_timings() {
	local kind="$1" dir="$2" start="$3" node_start="" init_start="" init_done="" ready="" workload=""
	# shellcheck disable=SC1091 # written by node.sh
	[[ -r "$dir/timings.env" ]] && source "$dir/timings.env"
	secs() { [[ -n "$1" && -n "$2" ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f s", b - a }' || echo "-"; }
	RESULT[$kind, init]="$(secs "$init_start" "$init_done")"
	RESULT[$kind, ready]="$(secs "$init_start" "$ready")"
	RESULT[$kind, workload]="$(secs "$init_start" "$workload")"
	RESULT[$kind, total]="$(secs "$start" "$EPOCHREALTIME")"
}

# The folders of KA_PRIVATE_DIRS the machine lacks (and their missing parents), made empty for
# the node to cover; listed in $KA_STATE/made-dirs, in the order made, for remove_mount_points.
make_mount_points() {
	local d part path parts
	for d in "${KA_PRIVATE_DIRS[@]}"; do
		path=""
		IFS=/ read -ra parts <<<"${d#/}"
		for part in "${parts[@]}"; do
			path+="/$part"
			[[ -d "$path" ]] && continue
			mkdir "$path"
			printf '%s\n' "$path" >>"$KA_STATE/made-dirs"
		done
	done
}

# Removes what make_mount_points made, deepest first; prints those that are no longer empty
# (something of the node reached the machine's disk).
remove_mount_points() {
	local d
	[[ -r "$KA_STATE/made-dirs" ]] || return 0
	while read -r d; do
		[[ -d "$d" ]] || continue
		rmdir "$d" 2>/dev/null || printf '%s\n' "$d"
	done < <(tac "$KA_STATE/made-dirs")
	rm -f "$KA_STATE/made-dirs"
}

# Takes down whatever a node (this run's or a killed run's) left, then checks the machine.
node_down() {
	set +e
	local pid left=() m
	pid="$(cat "$KA_STATE/node.pid" 2>/dev/null)"
	if e2e_pid_is "$pid" e2e/kubeadm/node.sh; then
		ka_log "stopping the node (pid $pid)"
		e2e_stop_pid "$pid" e2e/kubeadm/node.sh 120
	fi
	rm -f "$KA_STATE/node.pid"
	if ip netns list | grep -qw "$KA_NETNS"; then
		# Anything still in the node's network namespace was started by this script (node.sh's
		# own teardown should have stopped it all).
		for pid in $(ip netns pids "$KA_NETNS" 2>/dev/null); do
			left+=("process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80))")
			kill -KILL "$pid" 2>/dev/null
		done
		sleep 0.5
		ip netns del "$KA_NETNS"
	fi
	e2e_remove_cgroup "$KA_CGROUP" || left+=("cgroup $KA_CGROUP busy")
	# The node's mounts lived in its own mount namespace, gone with its last process; none may
	# show here.
	while read -r m; do left+=("mount $m"); done < <(awk '{ print $5 }' /proc/self/mountinfo | grep -F "$KA_DIR" || true)
	[[ ! -d "$KA_DIR" ]] || rm -rf --one-file-system "$KA_DIR" || left+=("$KA_DIR")
	while read -r m; do left+=("$m (made empty for the node, no longer empty)"); done < <(remove_mount_points)
	rmdir "$KA_STATE" 2>/dev/null
	verify_clean "${left[@]}"
	local rc=$?
	set -e
	return "$rc"
}

# verify_clean [LEFT...]: fails, naming them, if LEFT or anything of the node is still there.
verify_clean() {
	local left=("$@") m d
	ip netns list | grep -qw "$KA_NETNS" && left+=("netns $KA_NETNS")
	while read -r m; do
		[[ -d "$m/$KA_CGROUP" ]] && left+=("cgroup $m/$KA_CGROUP")
	done < <(e2e_cgroup_dirs)
	[[ -e "$KA_DIR" ]] && left+=("$KA_DIR")
	pgrep -f "$KA_DIR/" >/dev/null && left+=("processes of the node")
	# What the node made private must not have reached the machine.
	for d in "${HOST_ABSENT[@]}"; do
		[[ -e "$d" ]] && left+=("$d (created on the machine)")
	done
	iptables-save 2>/dev/null | grep -qE "kubeadm|$KA_CNI_BRIDGE|${KA_POD_SUBNET%.0.0/16}\." && left+=("iptables rules")
	ip -4 route | grep -qE "$KA_CNI_BRIDGE|${KA_POD_SUBNET%.0.0/16}\.|${KA_NODE_IP%.*}\." && left+=("routes")
	ip link show "$KA_CNI_BRIDGE" >/dev/null 2>&1 && left+=("link $KA_CNI_BRIDGE")
	if ((${#left[@]})); then
		ka_log "error: left behind: ${left[*]}"
		return 1
	fi
	ka_log "cleanup verified: no netns, process, mount, cgroup, folder, iptables rule or route of the node left; ${HOST_ABSENT[*]} still absent on the machine"
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$NODE_PID" ]]; then
		node_down || rc=1
	fi
	exit "$rc"
}

print_results() {
	local kinds=("$@") k
	printf '\nkubeadm v1.20.2 e2e (%s)\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
	printf '%-9s  %-9s  %-15s  %-22s  %-9s  %s\n' kubelet "init" "init -> Ready" "init -> logs+exec ok" total result
	for k in "${kinds[@]}"; do
		printf '%-9s  %-9s  %-15s  %-22s  %-9s  %s\n' "$k" "${RESULT[$k, init]}" "${RESULT[$k, ready]}" \
			"${RESULT[$k, workload]}" "${RESULT[$k, total]}" "${RESULT[$k, verdict]}"
	done
}

main() {
	parse_args "$@"
	[[ "$(id -u)" -eq 0 ]] || ka_die "must run as root"
	mkdir -p /run/kubelet-rs
	exec 9>"$KA_LOCK"
	flock -n 9 || ka_die "another e2e/kubeadm/run.sh runs (lock $KA_LOCK)"
	# Folders the node makes private that this machine does not have: they must stay absent.
	HOST_ABSENT=()
	local d
	for d in /etc/kubernetes /etc/cni /etc/default/kubelet /usr/lib/modules /opt/cni /opt/containerd \
		/var/lib/containerd; do
		[[ -e "$d" ]] || HOST_ABSENT+=("$d")
	done
	trap on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if ((DOWN_ONLY)) || ip netns list | grep -qw "$KA_NETNS" || [[ -e "$KA_DIR" ]]; then
		ka_log "taking down what a previous run left"
		node_down || ((DOWN_ONLY)) || ka_die "could not clean up a previous run"
		((DOWN_ONLY)) && return 0
	fi
	prepare
	local kinds=() k rc=0
	case "$KIND" in
	both) kinds=(ours upstream) ;;
	*) kinds=("$KIND") ;;
	esac
	for k in "${kinds[@]}"; do
		if [[ "$k" == ours ]]; then
			run_node ours "$OURS_BIN" || rc=1
		else
			run_node upstream "$KA_UPSTREAM_BIN/kubelet" || rc=1
		fi
	done
	print_results "${kinds[@]}"
	return "$rc"
}

main "$@"
