#!/usr/bin/env bash
# Usage: e2e/vm/smoke.sh [--suite bookworm|trixie]      (e2e/vm/run.sh smoke; as root)
#
# The cgroup v2 smoke of hack/test.sh: brings up one VM of its own, bookworm unless --suite
# (e2e/vm/run.sh up; a bed an earlier run left is taken down first, KRS_VM_REUSE=1 uses it
# instead), and on it, with the kubelet our Debian package installed, as systemd runs it:
#   1. configures it as a standalone node on the systemd cgroup driver (a drop-in beside the
#      package's unit, the way kubeadm's works; /var/lib/kubelet/config.yaml with podPidsLimit)
#      and puts two static pods in /etc/kubernetes/manifests: "limits" (Burstable: requests cpu
#      100m / memory 32Mi, limits cpu 200m / memory 64Mi) and "oom" (limit 32Mi, fills memory);
#   2. checks healthz (10248) answers ok and both pods are reported on the read-only port;
#   3. checks the cgroup v2 files upstream writes: the pod's slice
#      kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice with memory.max
#      64Mi, cpu.max "20000 100000" and pids.max from podPidsLimit; the container's
#      cri-containerd-<id>.scope in it with memory.max 64Mi, cpu.max "20000 100000" and cpu.weight
#      4 (100m = 102 shares, upstream's shares-to-weight conversion);
#   4. checks the "oom" container is reported OOMKilled (lastState) and restarted;
#   5. checks /stats/summary has the pod with CPU and memory figures, and /metrics/cadvisor has
#      container_memory_working_set_bytes and container_cpu_usage_seconds_total for it;
#   6. checks the PLEG follows the runtime's container events on containerd 1.7 and later (one
#      subscription in kubelet_evented_pleg_connection_success_count, the kubelet's log line)
#      and relists on 1.6 (none, and the log line saying why).
# Takes the bed down at the end when it brought it up (KRS_VM_KEEP=1 keeps it). Prints each
# check and how long the whole took; exits non-zero at the first failure, with the kubelet's
# journal.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"

POD_TIMEOUT="${KRS_VM_SMOKE_TIMEOUT:-240}"

# In the VM: the kubelet's settings and the two static pods, then a restart of kubelet.service.
SETUP=$(
	cat <<'VMEOF'
set -eu
mkdir -p /etc/systemd/system/kubelet.service.d /etc/kubernetes/manifests
cat >/etc/systemd/system/kubelet.service.d/20-krs-vm-smoke.conf <<'EOF'
[Service]
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml --container-runtime-endpoint=unix:///run/containerd/containerd.sock $KUBELET_EXTRA_ARGS
EOF
cat >/var/lib/kubelet/config.yaml <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
staticPodPath: /etc/kubernetes/manifests
readOnlyPort: 10255
podPidsLimit: 1000
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
EOF
cat >/etc/kubernetes/manifests/limits.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: limits
  namespace: default
spec:
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "while true; do echo tick; sleep 5; done"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
EOF
cat >/etc/kubernetes/manifests/oom.yaml <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: oom
  namespace: default
spec:
  containers:
  - name: hog
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    # tail keeps a line without end in memory: /dev/zero never ends one.
    command: ["sh", "-c", "sleep 2; tail /dev/zero"]
    resources:
      limits: {cpu: 100m, memory: 32Mi}
EOF
systemctl daemon-reload
systemctl restart kubelet
VMEOF
)

# In the VM: the read-only port's /pods.
POD_JSON='curl -sf --max-time 5 http://127.0.0.1:10255/pods'

T0=$SECONDS
BROUGHT_UP=0

check() { printf '[vm-smoke] ok: %s\n' "$*" >&2; }
fail() {
	printf '[vm-smoke] FAIL: %s\n' "$*" >&2
	vm_ssh 1 'journalctl -u kubelet --no-pager -n 60' >&2 || true
	exit 1
}

on_exit() {
	local status=$?
	if ((BROUGHT_UP)) && [[ "${KRS_VM_KEEP:-0}" != 1 ]]; then
		"$HERE/run.sh" down || true
	fi
	exit "$status"
}

in_vm() { vm_ssh 1 "$@"; }

# wait_for DESCRIPTION SECONDS SHELL: until SHELL (run in the VM) succeeds.
wait_for() {
	local t0=$SECONDS
	vm_wait 1 "$2" "$3" || fail "$1: not within $2 s"
	check "$1 ($((SECONDS - t0)) s)"
}

# expect NAME WANT GOT
expect() {
	[[ "$3" == "$2" ]] || fail "$1: want '$2', got '$3'"
	check "$1 = $3"
}

# The PLEG follows the runtime's container events where the runtime has them (containerd 1.7 and
# later): one subscription, and the kubelet says so; containerd 1.6 has none, and the kubelet says
# it relists.
check_pleg() {
	local version metrics successes
	version="$(in_vm 'containerd --version | cut -d" " -f3')"
	metrics="$(in_vm 'curl -sf --max-time 60 http://127.0.0.1:10255/metrics')" ||
		fail "/metrics did not answer"
	successes="$(awk '$1 == "kubelet_evented_pleg_connection_success_count" { print $2 }' <<<"$metrics")"
	if [[ "$(printf '%s\n' 1.7 "${version%%~*}" | sort -V | head -1)" == 1.7 ]]; then
		expect "evented PLEG subscriptions (containerd $version)" 1 "$successes"
		in_vm "journalctl -u kubelet --no-pager | grep -q \"Following the container runtime's events\"" ||
			fail "the kubelet did not log that it follows containerd $version's events"
		check "the kubelet follows the runtime's container events"
	else
		expect "evented PLEG subscriptions (containerd $version)" 0 "$successes"
		in_vm "journalctl -u kubelet --no-pager | grep -q 'offers no container events'" ||
			fail "the kubelet did not log that containerd $version has no container events"
		check "the kubelet relists: containerd $version has no container events"
	fi
}

main() {
	local suite=bookworm
	case "${1:-}" in
	--suite) suite="${2:?--suite takes bookworm or trixie}" ;;
	"") ;;
	*)
		sed -n '2p' "${BASH_SOURCE[0]}" >&2
		exit 2
		;;
	esac
	vm_require_root
	trap on_exit EXIT
	if [[ "$(vm_nodes)" == 0 || "${KRS_VM_REUSE:-0}" != 1 ]]; then
		[[ "$(vm_nodes)" == 0 ]] || "$HERE/run.sh" down
		BROUGHT_UP=1
		"$HERE/run.sh" up --nodes 1 --suite "$suite"
	fi
	check "vm1: $(in_vm 'printf "%s %s, containerd %s, runc %s" "$(. /etc/os-release; echo "$PRETTY_NAME")" "$(uname -r)" "$(containerd --version | cut -d" " -f3)" "$(runc --version | head -1 | cut -d" " -f3)"')"
	in_vm "$SETUP" || fail "configuring the kubelet in vm1"
	wait_for "healthz answers ok" 120 \
		'[ "$(curl -sf --max-time 5 http://127.0.0.1:10248/healthz)" = ok ]'
	wait_for "pod limits running" "$POD_TIMEOUT" \
		"$POD_JSON | jq -e '.items[] | select(.metadata.name == \"limits-vm1\") | .status.containerStatuses[0].state.running'"

	local uid cid slice scope
	uid="$(in_vm "$POD_JSON | jq -r '.items[] | select(.metadata.name == \"limits-vm1\") | .metadata.uid'")"
	cid="$(in_vm "$POD_JSON | jq -r '.items[] | select(.metadata.name == \"limits-vm1\") | .status.containerStatuses[0].containerID'")"
	cid="${cid#containerd://}"
	slice="/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${uid//-/_}.slice"
	scope="$slice/cri-containerd-$cid.scope"
	in_vm "test -d $slice" || fail "no pod slice $slice ($(in_vm 'ls /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice' | tr '\n' ' '))"
	check "pod slice $slice"
	expect "pod memory.max" 67108864 "$(in_vm "cat $slice/memory.max")"
	expect "pod cpu.max" "20000 100000" "$(in_vm "cat $slice/cpu.max")"
	expect "pod pids.max" 1000 "$(in_vm "cat $slice/pids.max")"
	in_vm "test -d $scope" || fail "no container scope $scope ($(in_vm "ls $slice" | tr '\n' ' '))"
	expect "container memory.max" 67108864 "$(in_vm "cat $scope/memory.max")"
	expect "container cpu.max" "20000 100000" "$(in_vm "cat $scope/cpu.max")"
	expect "container cpu.weight" 4 "$(in_vm "cat $scope/cpu.weight")"

	wait_for "pod oom: container OOMKilled and restarted" "$POD_TIMEOUT" \
		"$POD_JSON | jq -e '.items[] | select(.metadata.name == \"oom-vm1\") | .status.containerStatuses[0] | select(.restartCount > 0 and .lastState.terminated.reason == \"OOMKilled\")'"

	wait_for "/stats/summary: pod limits with CPU and memory" 60 \
		"curl -sf --max-time 10 http://127.0.0.1:10255/stats/summary | jq -e '.pods[] | select(.podRef.name == \"limits-vm1\") | select(.cpu.usageCoreNanoSeconds > 0 and .memory.workingSetBytes > 0)'"
	local metrics
	metrics="$(in_vm 'curl -sf --max-time 60 http://127.0.0.1:10255/metrics/cadvisor')" ||
		fail "/metrics/cadvisor did not answer"
	local family
	for family in container_memory_working_set_bytes container_cpu_usage_seconds_total; do
		grep -q "^$family{.*pod=\"limits-vm1\"" <<<"$metrics" ||
			fail "/metrics/cadvisor: no $family for pod limits-vm1"
		check "/metrics/cadvisor: $family for pod limits-vm1"
	done
	check_pleg
	printf '[vm-smoke] passed in %d s (VM up included)\n' "$((SECONDS - T0))" >&2
}

main "$@"
