#!/usr/bin/env bash
# Usage: images/node/check.sh [TAR]      (as root; default TAR: the output of images/node/build.sh)
#
# Checks the kind node image on this machine, as far as it allows (no Docker, no kind binary):
#   1. TAR is a valid OCI image layout: every blob's digest and size match what points at it,
#      the layer's diff_id matches its content, the config has kind's entrypoint, cmd, stop
#      signal and container=docker, and the layer holds what a kind node needs (images/node/
#      layout.py);
#   2. a containerd of our own (hack/testbed/containerd.sh start krs-node) imports it;
#   3. it boots as kind boots a node: a privileged container (ctr run --privileged) in its own
#      network namespace (only lo), tmpfs on /run and /tmp, and /var a fresh folder filled from
#      the image's /var (what Docker does for kind's /var volume), the entrypoint then systemd
#      as PID 1;
#   4. systemd comes up and starts containerd (which sees the preloaded control-plane images);
#      the kubelet unit waits for /var/lib/kubelet/config.yaml as under kind; the check then
#      writes a minimal KubeletConfiguration and kubeadm-flags.env (what `kubeadm init` would
#      write) and restarts the unit as kubeadm does; the kubelet running is kubelet-rs
#      (/usr/bin/kubelet), in kubelet.slice, and answers healthz on 127.0.0.1:10248;
#   5. the node stops on its stop signal (SIGRTMIN+3: systemd powers off) within systemd's own
#      stop bound (naming what held it if it took over 10 s), and everything is removed: the
#      container, its snapshot, the image, the /var folder, the containerd instance (purge); no
#      mount of it is left.
# Prints what it verified, with timings; exits non-zero at the first failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TESTBED="$REPO/hack/testbed"
# shellcheck source=hack/testbed/lib.sh
source "$TESTBED/lib.sh"

NODE_CACHE="${NODE_CACHE:-$KRS_CACHE_DIR/node-image}"
TAR="${1:-$NODE_CACHE/kubelet-rs-node.tar}"
INSTANCE=krs-node
NS="node-check"
CID=krs-node-check
WORK=/var/lib/kubelet-rs/node-check
BOOT_TIMEOUT_S=90
HEALTHZ_TIMEOUT_S=90
# systemd stops every unit at once, etcd's container with the rest, and gives each unit 90 s
# (DefaultTimeoutStopSec) before SIGKILL. kube-apiserver v1.20, with etcd gone, sometimes does
# not exit on SIGTERM at all (seen here: 60 s and more, and 91 s in CI, ended by the SIGKILL),
# whatever the kubelet: the check waits for systemd's own bound, and names what held the stop
# when it takes long.
STOP_TIMEOUT_S=120
SLOW_STOP_S=10

log() { printf '[node-check] %s\n' "$*" >&2; }
PASSED=()
# Machine-wide sysctls a kubelet may write (not per network namespace): they must not change.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)
declare -A SYSCTL_BEFORE=()
GUARD=()
GUARD_WAS_THERE=1
pass() {
	PASSED+=("$*")
	log "ok: $*"
}
die() {
	log "FAILED: $*"
	if [[ -s "$WORK/console.log" ]]; then
		log "the node's console (entrypoint, systemd):"
		tail -n 30 "$WORK/console.log" >&2
	fi
	exit 1
}

ctr_() { timeout 300 ctr --address "$SOCK" -n "$NS" "$@"; }
# in_node CMD...: runs CMD in the node (a process of the container, as `docker exec`).
EXEC_N=0
in_node() {
	EXEC_N=$((EXEC_N + 1))
	timeout 60 ctr --address "$SOCK" -n "$NS" tasks exec --exec-id "check-$$-$EXEC_N" "$CID" "$@"
}

cleanup() {
	local rc=$?
	set +e
	if [[ -n "${SOCK:-}" && -S "${SOCK:-}" ]]; then
		if ctr_ tasks ls -q 2>/dev/null | grep -xF "$CID" >/dev/null; then
			ctr_ tasks kill -s SIGKILL "$CID" >/dev/null 2>&1
			sleep 1
			ctr_ tasks delete -f "$CID" >/dev/null 2>&1
		fi
		ctr_ containers delete "$CID" >/dev/null 2>&1
		[[ -n "${IMAGE_NAME:-}" ]] && ctr_ images rm "$IMAGE_NAME" >/dev/null 2>&1
		ctr_ namespaces remove "$NS" >/dev/null 2>&1
	fi
	# Mounts the node made under its /var (pods, containerd's snapshots) come down with it;
	# whatever a killed node left behind is unmounted here, deepest first.
	if [[ -d "$WORK" ]]; then
		grep -F " $WORK" /proc/self/mountinfo | awk '{print $5}' | sort -r |
			while read -r m; do umount -l "$m"; done
		rm -rf "$WORK"
	fi
	"$TESTBED/containerd.sh" purge "$INSTANCE" >/dev/null 2>&1
	# containerd.sh start added a FORWARD guard for the instance's pod subnet; it goes if this
	# run added it.
	if ((${#GUARD[@]})) && ! ((GUARD_WAS_THERE)); then
		iptables -w 5 -D "${GUARD[@]}" 2>/dev/null
	fi
	rmdir "/var/lib/kubelet-rs/$INSTANCE" 2>/dev/null
	local key
	for key in "${!SYSCTL_BEFORE[@]}"; do
		if [[ "$(<"/proc/sys/$key")" != "${SYSCTL_BEFORE[$key]}" ]]; then
			log "FAILED: the node changed the machine's $key ($(<"/proc/sys/$key")); restored"
			echo "${SYSCTL_BEFORE[$key]}" >"/proc/sys/$key"
			rc=1
		fi
	done
	if grep -qE " ($WORK|/var/lib/kubelet-rs/$INSTANCE)" /proc/self/mountinfo; then
		log "FAILED: mounts left behind"
		rc=1
	fi
	# ctr put the node in /NS/CID of every hierarchy; the node's systemd removed what it made
	# below, runc the container's own; the namespace's folder is ours to remove. A folder that
	# is not empty means something of the node still runs.
	local d
	for d in /sys/fs/cgroup/*/"$NS" /sys/fs/cgroup/"$NS"; do
		[[ -d "$d" ]] || continue
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
		if [[ -d "$d" ]]; then
			log "FAILED: cgroup $d left behind"
			rc=1
		fi
	done
	if ((rc == 0)); then
		pass "clean-up: container, image, /var folder, containerd instance $INSTANCE, its FORWARD guard and the cgroups gone, no mount left, machine-wide sysctls unchanged"
		printf '\n[node-check] PASSED (%ss in all):\n' "$((SECONDS - T0))"
		printf '  - %s\n' "${PASSED[@]}"
	else
		printf '\n[node-check] FAILED after %ss; verified before that:\n' "$((SECONDS - T0))"
		printf '  - %s\n' "${PASSED[@]}"
	fi
	exit "$rc"
}

# wait_for TIMEOUT CMD...: retries CMD every 0.5 s until it succeeds; fails after TIMEOUT s.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 0.5
	done
}

unit_active() { [[ "$(in_node systemctl is-active "$1" 2>/dev/null)" == active ]]; }
system_up() {
	local s
	s="$(in_node systemctl is-system-running 2>/dev/null || true)"
	[[ "$s" == running || "$s" == degraded ]]
}
b64() { base64 -w0 <"$1"; }
healthz() { [[ "$(nsenter -t "$TASK_PID" -n curl -fsS --max-time 2 http://127.0.0.1:10248/healthz)" == ok ]]; }

write_kubeadm_files() {
	local node pki="$WORK/pki"
	node="$(in_node hostname)"
	mkdir -p "$pki" "$WORK/var/lib/kubelet"
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kubernetes -keyout "$pki/ca.key" \
		-out "$pki/ca.crt" -addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/O=system:nodes/CN=system:node:$node" \
		-keyout "$pki/node.key" -out "$pki/node.csr" 2>/dev/null
	printf '%s\n' basicConstraints=critical,CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
		extendedKeyUsage=clientAuth >"$pki/node.ext"
	openssl x509 -req -in "$pki/node.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 1 -extfile "$pki/node.ext" -out "$pki/node.crt" 2>/dev/null

	in_node mkdir -p /etc/kubernetes
	cat >"$WORK/kubelet.conf" <<-EOF
		apiVersion: v1
		kind: Config
		clusters:
		- name: kind
		  cluster:
		    server: https://127.0.0.1:6443
		    certificate-authority-data: $(b64 "$pki/ca.crt")
		contexts:
		- name: system:node:$node@kind
		  context:
		    cluster: kind
		    user: system:node:$node
		current-context: system:node:$node@kind
		users:
		- name: system:node:$node
		  user:
		    client-certificate-data: $(b64 "$pki/node.crt")
		    client-key-data: $(b64 "$pki/node.key")
	EOF
	# /etc is in the container's own root: copy the file in through its process's root.
	install -m 0600 "$WORK/kubelet.conf" "/proc/$TASK_PID/root/etc/kubernetes/kubelet.conf"
	cat >"$WORK/var/lib/kubelet/config.yaml" <<-'EOF'
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		cgroupDriver: systemd
		cgroupRoot: /kubelet
		failSwapOn: false
		healthzBindAddress: 127.0.0.1
		healthzPort: 10248
		staticPodPath: /etc/kubernetes/manifests
		authentication:
		  anonymous:
		    enabled: false
		  webhook:
		    enabled: false
		authorization:
		  mode: AlwaysAllow
	EOF
	cat >"$WORK/var/lib/kubelet/kubeadm-flags.env" <<-'EOF'
		KUBELET_KUBEADM_ARGS="--container-runtime=remote --container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=127.0.0.1"
	EOF
}

# task_field N: column N of the node's line in `ctr tasks ls` (2: pid, 3: status).
task_field() { ctr_ tasks ls | awk -v c="$CID" -v f="$1" '$1 == c { print $f }'; }
task_running() { [[ "$(task_field 3)" == RUNNING ]]; }

# stopping_units: the units systemd in the node is stopping right now, a line each, with the
# processes they still hold ("unit (pid name, ...)").
stopping_units() {
	local jobs unit procs units=()
	jobs="$(in_node systemctl list-jobs --no-pager --no-legend 2>/dev/null)" || return 0
	mapfile -t units < <(awk '$3 == "stop" && $4 == "running" { print $2 }' <<<"$jobs")
	for unit in "${units[@]}"; do
		procs="$(in_node systemctl status --no-pager --lines=0 "$unit" 2>/dev/null |
			grep -oE '─[0-9]+ [^ ]+' | sed 's/^─//' | paste -sd, -)" || true
		printf '%s (%s)\n' "$unit" "$procs"
	done
}

# stop_report: what systemd in the node still waits for, when it does not power off in time.
stop_report() {
	log "systemd's jobs in the node, and the end of its journal:"
	in_node systemctl list-jobs --no-pager >&2 || true
	stopping_units >&2
	in_node journalctl -b --no-pager -o short-monotonic >"$NODE_CACHE/check-stop-journal.log" 2>&1 || true
	tail -n 40 "$NODE_CACHE/check-stop-journal.log" >&2
	log "(the whole journal: $NODE_CACHE/check-stop-journal.log)"
}

kubectl_() { in_node kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }
pods_running() {
	local pods
	pods="$(kubectl_ get pods -n kube-system --no-headers 2>/dev/null)"
	for p in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
		grep -E "^$p-" <<<"$pods" | grep -qE ' 1/1 +Running ' || return 1
	done
}
node_ready() {
	[[ "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}
pod_running() { [[ "$(kubectl_ get pod krs-pause -o jsonpath='{.status.phase}')" == Running ]]; }

# kubeadm_init: what kind does on a control-plane node: a kubeadm config (kind's choices: the
# systemd cgroup driver, cgroupRoot /kubelet), `kubeadm init`, then a CNI (here a bridge conflist
# for the node's podCIDR, kind's default CNI being kindnetd, which cannot be had here).
# The node gets an address and a default route on a veth pair whose two ends stay in its own
# network namespace: nothing leaves it. kubeadm's preflight phase is skipped as kind skips it for
# kubeadm < 1.23 (it pulls images, through crictl, which the image lacks); CoreDNS (no image) too.
kubeadm_init() {
	local t=$SECONDS ip=10.92.0.2
	NODE_NAME=kind-control-plane
	in_node systemctl stop kubelet
	in_node rm -f /etc/kubernetes/kubelet.conf /var/lib/kubelet/config.yaml /var/lib/kubelet/kubeadm-flags.env
	in_node sh -euc "ip link add eth0 type veth peer name eth0-peer
		ip addr add $ip/24 dev eth0; ip link set eth0 up; ip link set eth0-peer up
		ip route add default dev eth0; hostname $NODE_NAME
		printf '127.0.0.1 localhost\n$ip $NODE_NAME\n' >/etc/hosts" || die "node network"
	cat >"$WORK/var/tmp/kubeadm.yaml" <<-EOF
		apiVersion: kubeadm.k8s.io/v1beta2
		kind: InitConfiguration
		localAPIEndpoint:
		  advertiseAddress: $ip
		  bindPort: 6443
		nodeRegistration:
		  name: $NODE_NAME
		  criSocket: unix:///run/containerd/containerd.sock
		  kubeletExtraArgs:
		    node-ip: $ip
		    provider-id: kind://docker/kind/$NODE_NAME
		---
		apiVersion: kubeadm.k8s.io/v1beta2
		kind: ClusterConfiguration
		kubernetesVersion: $(in_node cat /kind/version)
		clusterName: kind
		networking:
		  podSubnet: 10.244.0.0/16
		  serviceSubnet: 10.96.0.0/16
		---
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		cgroupDriver: systemd
		cgroupRoot: /kubelet
		failSwapOn: false
		# Nothing can be pulled again here: no image GC, no disk-pressure eviction.
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		evictionHard:
		  memory.available: 100Mi
		  nodefs.available: 1%
		  imagefs.available: 1%
		---
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		mode: iptables
		conntrack:
		  maxPerCore: 0
		  tcpEstablishedTimeout: 0s
		  tcpCloseWaitTimeout: 0s
	EOF
	if ! in_node kubeadm init --config /var/tmp/kubeadm.yaml --skip-phases=preflight,addon/coredns \
		>"$NODE_CACHE/check-kubeadm-init.log" 2>&1; then
		tail -n 20 "$NODE_CACHE/check-kubeadm-init.log" >&2
		die "kubeadm init failed (log $NODE_CACHE/check-kubeadm-init.log)"
	fi
	pass "kubeadm $(in_node kubeadm version -o short) init succeeded in $((SECONDS - t))s (phases preflight and addon/coredns skipped)"
	t=$SECONDS
	wait_for 120 pods_running || {
		kubectl_ get pods -A -o wide >&2 || true
		die "the control-plane static pods and kube-proxy are not all Running within 120s"
	}
	pass "static pods etcd, kube-apiserver, kube-controller-manager, kube-scheduler (mirror pods) and kube-proxy's DaemonSet pod Running and Ready, $((SECONDS - t))s after init"
	local cidr
	cidr="$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.spec.podCIDR}')"
	[[ -n "$cidr" ]] || die "the node has no podCIDR"
	cat >"$WORK/cni.conflist" <<-EOF
		{"cniVersion": "0.4.0", "name": "kind-check", "plugins": [
		  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
		   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$cidr"}]]}},
		  {"type": "portmap", "capabilities": {"portMappings": true}},
		  {"type": "loopback"}]}
	EOF
	install -D -m 0644 "$WORK/cni.conflist" "/proc/$TASK_PID/root/etc/cni/net.d/10-kind-check.conflist"
	t=$SECONDS
	wait_for 90 node_ready || die "node $NODE_NAME not Ready within 90s of the CNI config"
	local provider
	provider="$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.spec.providerID}')"
	[[ "$provider" == "kind://docker/kind/$NODE_NAME" ]] || die "node providerID is '$provider'"
	pass "node $NODE_NAME Ready $((SECONDS - t))s after a bridge CNI config for its podCIDR $cidr; kubelet version reported: $(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.nodeInfo.kubeletVersion}'), providerID $provider (kind's --provider-id)"
	kubectl_ taint node "$NODE_NAME" node-role.kubernetes.io/master- >/dev/null
	kubectl_ run krs-pause --image=k8s.gcr.io/pause:3.2 --image-pull-policy=IfNotPresent >/dev/null ||
		die "kubectl run"
	t=$SECONDS
	wait_for 90 pod_running || {
		kubectl_ describe pod krs-pause >&2 || true
		die "pod krs-pause not Running within 90s"
	}
	pass "a pod (k8s.gcr.io/pause:3.2, preloaded) Running on the pod network at $(kubectl_ get pod krs-pause -o jsonpath='{.status.podIP}') $((SECONDS - t))s after kubectl run"
}

main() {
	krs_require_root
	T0=$SECONDS
	[[ -s "$TAR" ]] || krs_die "$TAR missing: run images/node/build.sh"
	command -v curl >/dev/null || krs_die "curl missing"

	log "1. the OCI layout: $TAR"
	local t=$SECONDS report
	report="$(python3 "$HERE/layout.py" "$TAR")" || die "OCI layout check: $report"
	IMAGE_NAME="$(sed -n 's/^name //p' <<<"$report")"
	local digest
	digest="$(sed -n 's/^digest //p' <<<"$report")"
	pass "valid OCI layout ($((SECONDS - t))s): $(sed -n 's/^summary //p' <<<"$report")"
	pass "config: $(sed -n 's/^config //p' <<<"$report")"
	pass "layer holds: $(sed -n 's/^holds //p' <<<"$report")"

	local subnet
	subnet="$("$TESTBED/containerd.sh" env "$INSTANCE" | sed -n 's/^export KRS_POD_SUBNET=//p')"
	GUARD=(FORWARD -s "$subnet" ! -d "$subnet" -m comment --comment "kubelet-rs $INSTANCE: pod traffic stays on the pod network" -j DROP)
	GUARD_WAS_THERE=0
	iptables -w 5 -C "${GUARD[@]}" 2>/dev/null && GUARD_WAS_THERE=1
	local key
	for key in "${SYSCTLS[@]}"; do
		[[ -e "/proc/sys/$key" ]] && SYSCTL_BEFORE[$key]="$(<"/proc/sys/$key")"
	done
	trap cleanup EXIT
	log "2. import into containerd instance $INSTANCE"
	eval "$("$TESTBED/containerd.sh" start "$INSTANCE")"
	SOCK="$KRS_CONTAINERD_SOCK"
	t=$SECONDS
	ctr_ images import --all-platforms "$TAR" >/dev/null || die "ctr images import"
	local got
	got="$(ctr_ images ls | awk -v n="$IMAGE_NAME" '$1 == n { print $3 }')"
	[[ "$got" == "$digest" ]] || die "after import, $IMAGE_NAME is '$got', not $digest"
	pass "containerd $(containerd --version | awk '{print $3}') imported $IMAGE_NAME as $digest ($((SECONDS - t))s, unpacked)"

	log "3. boot it as kind does"
	rm -rf "$WORK"
	mkdir -p "$WORK"
	t=$SECONDS
	local layer
	layer="$(sed -n 's/^layer //p' <<<"$report")"
	tar -xOf "$TAR" "$layer" | tar -xz --numeric-owner -p -C "$WORK" var || die "copying the image's /var"
	pass "/var volume filled from the image ($(du -sh "$WORK/var" | cut -f1), $((SECONDS - t))s)"
	t=$SECONDS
	ctr_ run -d --privileged \
		--mount "type=bind,src=$WORK/var,dst=/var,options=rbind:rw" \
		--mount "type=tmpfs,src=tmpfs,dst=/run,options=mode=755:nosuid:nodev" \
		--mount "type=tmpfs,src=tmpfs,dst=/tmp,options=mode=1777:nosuid:nodev" \
		--log-uri "file://$WORK/console.log" \
		"$IMAGE_NAME" "$CID" >/dev/null || die "ctr run"
	TASK_PID="$(task_field 2)"
	[[ "$TASK_PID" =~ ^[0-9]+$ ]] || die "no task pid"
	[[ "$(readlink "/proc/$TASK_PID/ns/net")" != "$(readlink /proc/self/ns/net)" ]] ||
		die "the node shares the machine's network namespace"
	local links
	links="$(nsenter -t "$TASK_PID" -n ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')"
	[[ "$links" == "lo " ]] || die "the node's network namespace has more than lo: $links"
	pass "privileged container $CID started, pid $TASK_PID, own network namespace with only: $links"

	log "4. systemd, containerd, kubelet"
	wait_for "$BOOT_TIMEOUT_S" system_up || {
		in_node systemctl --failed --no-pager || true
		die "systemd did not reach running/degraded within ${BOOT_TIMEOUT_S}s"
	}
	local state comm
	state="$(in_node systemctl is-system-running || true)"
	comm="$(in_node cat /proc/1/comm)"
	[[ "$comm" == systemd ]] || die "PID 1 in the node is $comm, not systemd"
	pass "systemd is PID 1 and the system is $state after $((SECONDS - t))s ($(in_node systemctl --version | head -n1))"
	if [[ "$state" == degraded ]]; then
		log "failed units (tolerated, as in kind nodes): $(in_node systemctl --failed --plain --no-legend --no-pager | awk '{print $1}' | tr '\n' ' ')"
	fi
	wait_for 30 unit_active containerd || die "containerd.service is not active"
	local preloaded
	preloaded="$(in_node ctr -n k8s.io images ls -q | grep -c '^k8s.gcr.io/' || true)"
	((preloaded >= 6)) || die "the node's containerd lists $preloaded preloaded k8s.gcr.io images, expected 6"
	pass "containerd.service active ($(in_node containerd --version | awk '{print $3}')), $preloaded preloaded control-plane images: $(in_node ctr -n k8s.io images ls -q | grep '^k8s.gcr.io/' | sed 's#k8s.gcr.io/##' | tr '\n' ' ')"
	# The preloaded images are usable, not only listed: a container from the etcd image runs
	# its binary in the node's containerd (snapshot unpacked at build time, no pull).
	local etcd_version
	etcd_version="$(in_node ctr -n k8s.io run --rm k8s.gcr.io/etcd:3.4.13-0 "preload-$$" \
		/usr/local/bin/etcd --version 2>&1 | head -n1)" || true
	[[ "$etcd_version" == "etcd Version: 3.4"* ]] ||
		die "a container from the preloaded etcd image did not run etcd: $etcd_version"
	pass "a container from the preloaded k8s.gcr.io/etcd:3.4.13-0 ran in the node's containerd: $etcd_version"
	local kstate
	kstate="$(in_node systemctl is-active kubelet || true)"
	[[ "$kstate" != active ]] || die "kubelet active before its config exists (ConditionPathExists)"
	pass "kubelet.service enabled ($(in_node systemctl is-enabled kubelet)) and waiting for /var/lib/kubelet/config.yaml ($kstate)"

	# What `kubeadm init` writes before it restarts the kubelet (kubelet-start phase), as kind
	# configures it: the KubeletConfiguration (systemd cgroup driver, cgroupRoot /kubelet),
	# kubeadm-flags.env, and /etc/kubernetes/kubelet.conf with an embedded client certificate
	# for system:node:NAME. Its API server (127.0.0.1:6443 in the node) is not running, as at
	# that point of kubeadm init: the kubelet must come up and serve healthz regardless.
	write_kubeadm_files
	t=$SECONDS
	in_node systemctl restart kubelet || die "systemctl restart kubelet"
	wait_for "$HEALTHZ_TIMEOUT_S" healthz || {
		in_node journalctl -u kubelet --no-pager -n 30 || true
		die "kubelet healthz did not answer ok within ${HEALTHZ_TIMEOUT_S}s"
	}
	local kpid exe version cg
	kpid="$(in_node systemctl show -p MainPID --value kubelet)"
	exe="$(in_node readlink "/proc/$kpid/exe")"
	version="$(in_node /usr/bin/kubelet --version)"
	cg="$(in_node grep -E '^[0-9]+:name=systemd:|^0::' "/proc/$kpid/cgroup" | head -n1 | cut -d: -f3)"
	[[ "$exe" == /usr/bin/kubelet ]] || die "the kubelet's executable is $exe"
	[[ "$version" == *kubelet-rs* ]] || die "/usr/bin/kubelet is not kubelet-rs: $version"
	[[ "$cg" == */kubelet.slice/kubelet.service ]] || die "the kubelet runs in cgroup $cg, not kubelet.slice/kubelet.service"
	pass "kubelet.service active: pid $kpid, $exe ($version), cgroup $cg; healthz on 127.0.0.1:10248 said ok $((SECONDS - t))s after the restart"
	in_node journalctl -u kubelet --no-pager -n 200 >"$NODE_CACHE/check-kubelet.log" 2>&1 || true

	log "5. kubeadm init in the node, as kind runs it"
	kubeadm_init

	log "6. stop (SIGRTMIN+3) and clean up"
	t=$SECONDS
	ctr_ tasks kill -s SIGRTMIN+3 "$CID" >/dev/null || die "ctr tasks kill"
	local deadline=$((SECONDS + STOP_TIMEOUT_S)) slow=""
	while task_running; do
		if [[ -z "$slow" ]] && ((SECONDS - t >= SLOW_STOP_S)); then
			slow="$(stopping_units | paste -sd';' - | sed 's/;/; /g')"
			slow="${slow:-no unit named}"
			log "still stopping after ${SLOW_STOP_S}s: $slow"
		fi
		if ((SECONDS >= deadline)); then
			stop_report
			die "the node did not stop within ${STOP_TIMEOUT_S}s of SIGRTMIN+3"
		fi
		sleep 0.5
	done
	pass "systemd powered the node off on SIGRTMIN+3 in $((SECONDS - t))s${slow:+ (slow: $slow)}"
	ctr_ tasks delete "$CID" >/dev/null 2>&1 || true
	ctr_ containers delete "$CID" >/dev/null || die "ctr containers delete"
	ctr_ images rm "$IMAGE_NAME" >/dev/null || die "ctr images rm"
}

main "$@"
