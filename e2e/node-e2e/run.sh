#!/usr/bin/env bash
# Usage: e2e/node-e2e/run.sh --kubelet ours|upstream --suite SUITE [--artifacts DIR]
#                            [--no-results] [--timeout DURATION]
#        e2e/node-e2e/run.sh --down
#
# Runs the upstream v1.20.2 node e2e suite (test/e2e_node, e2e_node.test) against our kubelet
# or the upstream kubelet v1.20.2 on this machine, with the same flags, and leaves the machine
# as it found it.
#
#   --kubelet ours|upstream   the kubelet under test: ours (cargo build --release, or
#                             $KRS_E2E_KUBELET) or upstream's
#   --suite SUITE             node-conformance  [NodeConformance], skipping [Flaky] [Slow]
#                                               [Serial] [Disruptive] (upstream's presubmit job)
#                             full              every spec, skipping [Flaky] (the serial and
#                                               slow ones included; several hours)
#                             devices           the device plugin, CPU manager and topology
#                                               manager specs ([Serial]; issue 29's resource
#                                               managers, each changing the kubelet's config)
#                             quick             the specs of e2e/node-e2e/quick.txt (none yet;
#                                               meant for CI)
#                             focus:REGEX       the specs REGEX matches, skipping [Flaky]
#                             Every suite also skips the specs section 3 of e2e/skips.md names.
#   --artifacts DIR           logs and junit of this run (default
#                             /var/tmp/kubelet-rs-e2e/node-e2e-<kubelet>-<suite>, emptied first)
#   --no-results              do not copy a node-conformance, devices or full run to
#                             e2e/results/ (a full run goes to node-e2e, a node-conformance
#                             one to node-e2e-conformance, a devices one to node-e2e-devices)
#   --timeout DURATION        the whole suite's time limit (default 6h): then the bed goes down
#   --down                    only take down what a killed run left
#
# The bed (e2e/node-e2e/lib.sh): one network namespace of its own, where inside.sh runs
# a test-bed containerd, e2e_node.test with --start-services (its own etcd and apiserver, and
# the kubelet it starts from --k8s-bin-dir with the suite's own flags and config file) and the
# bed-side helpers. Flags both kubelets get on top of the suite's, and why:
#   --node-ip           the namespace's eth0 address (the suite gives none)
#   --system-cgroups=   the suite asks for /system, which would move every process of the
#                       machine's root cgroup into it
#   --dynamic-config-dir=   no Dynamic Kubelet Config in either kubelet: config-agent.sh applies
#                       the specs' configuration changes to the config file and restarts the
#                       kubelet, the same way for both
#   --fail-swap-on=false, --image-gc-high/low-threshold=100/99, --resolv-conf, the sandbox
#                       image: as e2e/node.sh gives its nodes, for the same reasons
# The kubelet is restarted by the suite's own service monitor whenever it exits; the shims
# (shims/sudo, shims/systemctl) turn the suite's systemctl calls into that.
#
# Exit status: 0 if no selected spec failed, 1 if some failed or the bed did not come up, 2
# for usage errors.
# Env: CARGO_TARGET_DIR (default /var/cache/kubelet-rs/target), KRS_E2E_KUBELET (our kubelet
# binary: skips the cargo build).
set -euo pipefail

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
# shellcheck source=e2e/node-e2e/lib.sh
source "$HERE/lib.sh"
E2E="$NE2E_REPO/e2e"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}"
TAGS_NODE_CONFORMANCE='\[Flaky\]|\[Slow\]|\[Serial\]|\[Disruptive\]'
TAGS_FULL='\[Flaky\]'
# The specs of the devices suite. "CPU Manager \[Serial\]" and not "CPU Manager": the topology
# manager's context names the CPU manager too.
FOCUS_DEVICES='Device Plugin|CPU Manager \[Serial\]|Topology Manager'

KIND=""
SUITE=""
ARTIFACTS=""
RESULTS=1
TIMEOUT=6h
DOWN_ONLY=0
INSIDE_PID=""
KUBELET_BIN=""
KUBELET_SHA256=""
KUBELET_COMMIT=""
KUBELET_FLAGS=""
FOCUS=""
TAG_SKIP=""
DURATION_S=0

usage() { sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; }

parse_args() {
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kubelet | --suite | --artifacts | --timeout)
			[[ $# -ge 2 ]] || {
				usage >&2
				exit 2
			}
			case "$1" in
			--kubelet) KIND="$2" ;;
			--suite) SUITE="$2" ;;
			--artifacts) ARTIFACTS="$2" ;;
			--timeout) TIMEOUT="$2" ;;
			esac
			shift 2
			;;
		--kubelet=* | --suite=* | --artifacts=* | --timeout=*)
			local key="${1%%=*}" value="${1#*=}"
			shift
			set -- "$key" "$value" "$@"
			;;
		--no-results)
			RESULTS=0
			shift
			;;
		--down)
			DOWN_ONLY=1
			shift
			;;
		-h | --help)
			usage
			exit 0
			;;
		*)
			usage >&2
			ne2e_log "unknown argument: $1"
			exit 2
			;;
		esac
	done
	((DOWN_ONLY)) && return 0
	[[ "$KIND" == ours || "$KIND" == upstream ]] || {
		usage >&2
		exit 2
	}
	[[ "$SUITE" =~ ^(node-conformance|full|devices|quick|focus:.+)$ ]] || {
		usage >&2
		exit 2
	}
	[[ "$TIMEOUT" =~ ^[0-9]+[smh]$ ]] || ne2e_die "--timeout takes a duration such as 90m or 6h"
	ARTIFACTS="${ARTIFACTS:-/var/tmp/kubelet-rs-e2e/node-e2e-$KIND-${SUITE%%:*}}"
}

suite_regexes() {
	e2e_skip_names 3 >"$ARTIFACTS/skip-names.txt"
	case "$SUITE" in
	node-conformance)
		FOCUS='\[NodeConformance\]'
		TAG_SKIP="$TAGS_NODE_CONFORMANCE"
		;;
	full)
		FOCUS='.'
		TAG_SKIP="$TAGS_FULL"
		;;
	devices)
		FOCUS="$FOCUS_DEVICES"
		TAG_SKIP="$TAGS_FULL"
		;;
	quick)
		grep -v '^[[:space:]]*\(#\|$\)' "$HERE/quick.txt" >"$ARTIFACTS/expected-names.txt" || true
		FOCUS="$(e2e_names_regex <"$ARTIFACTS/expected-names.txt")" ||
			ne2e_die "e2e/node-e2e/quick.txt names no spec yet"
		TAG_SKIP="$TAGS_FULL"
		;;
	focus:*)
		FOCUS="${SUITE#focus:}"
		TAG_SKIP="$TAGS_FULL"
		;;
	esac
	SKIP="$TAG_SKIP"
	local named
	if named="$(e2e_names_regex <"$ARTIFACTS/skip-names.txt")"; then
		SKIP="$SKIP|$named"
	fi
}

build_all() {
	krs_upstream_ensure node-e2e e2e-images
	if [[ "$KIND" == upstream ]]; then
		KUBELET_BIN="$(krs_upstream_bin kubelet)"
	elif [[ -n "${KRS_E2E_KUBELET:-}" ]]; then
		KUBELET_BIN="$(readlink -f "$KRS_E2E_KUBELET")"
		[[ -x "$KUBELET_BIN" ]] || ne2e_die "KRS_E2E_KUBELET=$KRS_E2E_KUBELET is not executable"
	else
		ne2e_log "cargo build --release (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
		(cd "$NE2E_REPO" && nice -n 10 cargo build --release --bin kubelet) >&2
		KUBELET_BIN="$CARGO_TARGET_DIR/release/kubelet"
	fi
	# Read now: a rebuild during the run must not change the record.
	KUBELET_SHA256="$(sha256sum "$KUBELET_BIN" | cut -d' ' -f1)"
	KUBELET_COMMIT="$(e2e_kubelet_commit "$KUBELET_BIN")"
	ne2e_log "building the test images (hack/testbed/images.sh, e2e/images.sh)"
	"$NE2E_REPO/hack/testbed/images.sh" --list "$ARTIFACTS/images-base.list" >>"$ARTIFACTS/images.log" 2>&1 ||
		ne2e_die "hack/testbed/images.sh --list failed; see $ARTIFACTS/images.log"
	"$E2E/images.sh" --tarballs "$ARTIFACTS/images-e2e.list" >>"$ARTIFACTS/images.log" 2>&1 ||
		ne2e_die "e2e/images.sh --tarballs failed; see $ARTIFACTS/images.log"
}

bed_down() {
	set +e
	if [[ -n "$INSIDE_PID" ]] && kill -0 "$INSIDE_PID" 2>/dev/null; then
		kill -TERM "$INSIDE_PID"
		wait "$INSIDE_PID" 2>/dev/null
	fi
	INSIDE_PID=""
	# A killed run leaves the suite's processes in the namespace: they are ours by their
	# network namespace, and nothing else ever runs in it.
	if ip netns list | grep -qw "$NE2E_NETNS"; then
		local p
		for p in $(ip netns pids "$NE2E_NETNS" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
		if "$NE2E_REPO/hack/testbed/containerd.sh" status "$NE2E_INSTANCE" >/dev/null 2>&1 ||
			[[ -d "/run/kubelet-rs/$NE2E_INSTANCE" ]]; then
			ip netns exec "$NE2E_NETNS" "$NE2E_REPO/hack/testbed/containerd.sh" purge "$NE2E_INSTANCE" >/dev/null 2>&1
		fi
		ip netns delete "$NE2E_NETNS"
	fi
	local c
	for c in "${NE2E_CGROUPS[@]}"; do e2e_remove_cgroup "$c"; done
	rm -rf --one-file-system "$NE2E_WORK"
	# containerd.sh purge empties the instance's folder and leaves it.
	rmdir "/var/lib/kubelet-rs/$NE2E_INSTANCE" 2>/dev/null
	set -e
}

bed_up() {
	ip netns add "$NE2E_NETNS"
	ip -n "$NE2E_NETNS" link set lo up
	# The node's address sits on one end of a veth pair whose both ends stay in the namespace
	# (the kernel here has no dummy device). The default route goes out of eth0 (the in-process
	# apiserver and the kubelets take the node's address from its interface) into eth0-end,
	# where whatever arrives is dropped: nothing leaves the namespace.
	ip -n "$NE2E_NETNS" link add eth0 type veth peer name eth0-end
	ip -n "$NE2E_NETNS" addr add "$NE2E_NODE_IP/24" dev eth0
	ip -n "$NE2E_NETNS" link set eth0-end up
	ip -n "$NE2E_NETNS" link set eth0 up
	ip -n "$NE2E_NETNS" route add default dev eth0
	ip netns exec "$NE2E_NETNS" iptables -w 5 -I FORWARD 1 -i eth0-end \
		-m comment --comment "kubelet-rs node-e2e: nothing leaves the bed" -j DROP
	ip netns exec "$NE2E_NETNS" iptables -w 5 -I INPUT 1 -i eth0-end \
		-m comment --comment "kubelet-rs node-e2e: nothing leaves the bed" -j DROP
	mkdir -p "$NE2E_WORK" "$NE2E_BIN_DIR"
	ln -sfn "$KUBELET_BIN" "$NE2E_BIN_DIR/kubelet"
}

# Sets KUBELET_FLAGS: the flags both kubelets get on top of the suite's, space separated (the
# suite splits --kubelet-flags at white space).
kubelet_flags() {
	local sandbox
	sandbox="$(source "$NE2E_REPO/hack/testbed/lib.sh" && printf '%s' "$KRS_SANDBOX_IMAGE")"
	KUBELET_FLAGS="--node-ip=$NE2E_NODE_IP --system-cgroups= --dynamic-config-dir="
	KUBELET_FLAGS+=" --fail-swap-on=false --image-gc-high-threshold=100 --image-gc-low-threshold=99"
	KUBELET_FLAGS+=" --resolv-conf=$NE2E_RESOLV_CONF --pod-infra-container-image=$sandbox"
}

run_suite() {
	kubelet_flags
	local args=(
		--ginkgo.focus="$FOCUS"
		--ginkgo.skip="$SKIP"
		--ginkgo.noColor
		--ginkgo.v
		--k8s-bin-dir="$NE2E_BIN_DIR"
		--node-name="$NE2E_NODE"
		--container-runtime=remote
		--prepull-images=false
		--report-dir="$ARTIFACTS/junit"
		--kubelet-flags="$KUBELET_FLAGS"
		--test.timeout=0
	)
	printf '%s\n' "${args[@]}" >"$ARTIFACTS/suite.args"
	ne2e_log "the $KIND kubelet: $KUBELET_BIN"
	ne2e_log "suite log: $ARTIFACTS/suite.log"
	local start=$SECONDS rc=0
	NE2E_ARTIFACTS="$ARTIFACTS" NE2E_KUBECTL="$(krs_upstream_bin kubectl)" \
		NE2E_IMAGE_LISTS="$ARTIFACTS/images-base.list:$ARTIFACTS/images-e2e.list" \
		NE2E_SUITE_BIN="$(krs_upstream_bin e2e_node.test)" \
		timeout --signal=TERM --kill-after=120 "$TIMEOUT" nsenter --net="/run/netns/$NE2E_NETNS" unshare --mount --uts --propagation private \
		"$HERE/inside.sh" "${args[@]}" &
	INSIDE_PID=$!
	wait "$INSIDE_PID" || rc=$?
	INSIDE_PID=""
	DURATION_S=$((SECONDS - start))
	ne2e_log "the suite ended with status $rc after $((DURATION_S / 60)) min $((DURATION_S % 60)) s"
	return "$rc"
}

run_info() {
	cat <<EOF
suite: node-e2e ${SUITE%%:*} (e2e_node.test v1.20.2)
kubelet: $KIND ($KUBELET_BIN)
kubelet sha256: $KUBELET_SHA256
kubelet commit: $KUBELET_COMMIT
harness commit: $(git -C "$NE2E_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$NE2E_REPO" diff --quiet HEAD -- e2e 2>/dev/null || echo " (e2e/ dirty)")
machine: $(uname -r), $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup, PID 1 $(ps -o comm= -p 1), containerd $(containerd --version 2>/dev/null | awk '{ print $3 }')
nodes: 1
parallel: 1
date: $(date -u '+%Y-%m-%d %H:%M UTC')
duration: $((DURATION_S / 60)) min $((DURATION_S % 60)) s (e2e_node.test)
focus: $FOCUS
skip: $TAG_SKIP and the $(wc -l <"$ARTIFACTS/skip-names.txt") specs of e2e/skips.md section 3
kubelet flags on top of the suite's: $KUBELET_FLAGS
EOF
}

summarize() {
	local out="$ARTIFACTS/result" junits=() name
	mapfile -t junits < <(find "$ARTIFACTS/junit" -name 'junit*.xml' 2>/dev/null | sort)
	((${#junits[@]})) || ne2e_die "e2e_node.test wrote no junit file; see $ARTIFACTS/suite.log"
	case "$SUITE" in
	full) name=node-e2e ;;
	node-conformance) name=node-e2e-conformance ;;
	*) name="node-e2e-${SUITE%%:*}" ;;
	esac
	run_info >"$ARTIFACTS/run.txt"
	python3 "$E2E/junit.py" summarize --suite "$name" --kubelet "$KIND" \
		--focus "$FOCUS" --tag-skip "$TAG_SKIP" --skip-names "$ARTIFACTS/skip-names.txt" \
		--run-info "$ARTIFACTS/run.txt" --out "$out" "${junits[@]}"
	cat "$out/summary.md"
	if ((RESULTS)) && [[ "$SUITE" =~ ^(full|node-conformance|devices)$ ]]; then
		local dest="$E2E/results/$name/$KIND" j
		rm -rf "$dest"
		mkdir -p "$dest/ginkgo"
		cp "$out/junit.xml" "$out/summary.md" "$out/summary.json" "$ARTIFACTS/run.txt" "$dest/"
		for j in "${junits[@]}"; do
			gzip -9n <"$j" >"$dest/ginkgo/$(basename "$j").gz"
		done
		"$E2E/compare.sh" "$name"
		ne2e_log "results in $dest; comparison in $E2E/results/$name/specs.md"
	fi
	local expect=()
	[[ "$SUITE" != quick ]] || expect=(--expect "$ARTIFACTS/expected-names.txt")
	python3 "$E2E/junit.py" failed "${expect[@]}" "$out/summary.json"
}

on_exit() {
	local rc=$?
	trap - EXIT
	bed_down
	exit "$rc"
}

main() {
	parse_args "$@"
	[[ "$(id -u)" -eq 0 ]] || ne2e_die "must run as root"
	mkdir -p /run/kubelet-rs
	exec 8>"$NE2E_LOCK"
	flock -n 8 || ne2e_die "another e2e/node-e2e/run.sh runs (lock $NE2E_LOCK)"
	trap on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if ((DOWN_ONLY)); then
		bed_down
		return
	fi
	if ip netns list | grep -qw "$NE2E_NETNS" || [[ -d "$NE2E_WORK" ]]; then
		ne2e_log "a previous run left its bed up: taking it down first"
		bed_down
	fi
	rm -rf "$ARTIFACTS"
	mkdir -p "$ARTIFACTS"
	suite_regexes
	build_all
	bed_up
	local rc=0
	run_suite || rc=1
	summarize || rc=1
	return "$rc"
}

main "$@"
