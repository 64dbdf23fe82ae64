#!/usr/bin/env bash
# Usage: e2e/kubeadm/node.sh     (started by e2e/kubeadm/run.sh only)
#
# The kubeadm node, from a bare machine to `kubeadm reset -f` and back. run.sh starts it inside
# the node's network namespace (e2e/kubeadm/lib.sh) and a new mount and UTS namespace:
#   nsenter --net=/run/netns/krs-kubeadm unshare --mount --uts --propagation private node.sh
# In there it
#   1. makes private what a kubeadm node writes outside its own folders, without touching the
#      machine: /etc is an overlay (its upper layer in the node's folder) so /etc/kubernetes,
#      /etc/cni/net.d, /etc/default/kubelet, /etc/hosts (the node's name) and /etc/resolv.conf (no
#      resolver: nameserver 127.0.0.1) exist only here; /run is a tmpfs (containerd's socket at
#      kubeadm's default /run/containerd/containerd.sock, /run/xtables.lock); /var/lib/kubelet,
#      /var/lib/etcd, /var/lib/cni, /var/log/pods, /var/log/containers and
#      /usr/libexec/kubernetes are private folders; /lib/modules, which this machine lacks and
#      kube-proxy's DaemonSet mounts (containerd would create it on the machine's disk), comes
#      from an overlay on /usr/lib; the sysctls a kubelet writes that are not per network
#      namespace get private copies;
#   2. the network rules of the test bed: ip_forward in the node, the service CIDR blackholed, an
#      iptables FORWARD rule that drops pod traffic leaving the pod network;
#   3. starts containerd (restrict_oom_score_adj, registries pinned to a closed local port, CNI
#      config folder /etc/cni/net.d, empty until step 7) and imports the images run.sh built;
#   4. puts `kubelet` (ours or upstream's), `kubeadm`, `kubectl`, `crictl` (crictl.py: no
#      registry here serves cri-tools) and `systemctl` (e2e/kubeadm/systemctl, for the unit below)
#      first on PATH, and writes /etc/default/kubelet;
#   5. starts kubelet-service.sh, which plays systemd's kubelet.service with kubeadm's drop-in
#      (enabled: it crash-loops until kubeadm writes the kubelet's config, as on a real node);
#   6. `kubeadm init --config` (the config file below) with the preflight errors run.sh names
#      ignored and the addon/coredns phase skipped (run.sh says why); kubeadm stops, starts and
#      restarts the kubelet itself through `systemctl`; checks that kubelet-finalize found the
#      kubelet's rotatable client certificate;
#   7. installs a CNI bridge config for the node's podCIDR (as a user applies a network add-on),
#      waits for the node to be Ready, removes the control-plane taint, runs a Deployment and
#      checks `kubectl logs` and `kubectl exec` on its pod, and that the control plane's mirror
#      pods and kube-proxy's pod exist and every kube-system pod runs and is ready; then the
#      kubelet crashes (SIGKILL): restarted by the unit, it must adopt every container;
#   8. `kubeadm reset -f` (which stops the kubelet with `systemctl stop kubelet`), removes the CNI
#      config (reset leaves it to the user), checks that no file is left in /etc/kubernetes,
#      /var/lib/kubelet, /var/lib/etcd, no mount under /var/lib/kubelet and no pod in containerd;
#   9. on any exit: stops the kubelet service, containerd, its shims and containers.
# A failed check of the kubelet (check_failed) does not stop the run: every one is reported, and
# the run ends failed. Writes $KA_ARTIFACTS/timings.env (epoch seconds of each step) and
# $KA_ARTIFACTS/verdict ("ok", or what failed). Environment (set by run.sh): KA_KIND,
# KA_KUBELET_BIN, KA_ARTIFACTS, KA_IMAGES_LIST, KA_PY, KA_STUBS, KA_IGNORE_PREFLIGHT,
# KA_SKIP_PHASES.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/kubeadm/lib.sh
source "$HERE/lib.sh"
# shellcheck source=e2e/lib.sh
source "$KA_REPO/e2e/lib.sh"

BIN_DIR="$KA_DIR/bin"
CONTAINERD_DIR="$KA_DIR/containerd"
CONTAINERD_PID=""
SERVICE_PID=""
CHILD_PID=""
KUBEADM_CONFIG="$KA_DIR/kubeadm-config.yaml"
LOGS=""
READY_TIMEOUT_S=300
REGISTRIES=(k8s.gcr.io registry.k8s.io docker.io registry-1.docker.io index.docker.io gcr.io
	quay.io ghcr.io)

nlog() { printf '[kubeadm-node %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail() {
	printf '%s\n' "$*" >"$KA_ARTIFACTS/verdict"
	nlog "FAILED: $*"
	exit 1
}
# check_failed MSG: a check of the kubelet failed; the run goes on (so that every such failure
# and the remaining timings are seen) and ends failed.
FAILED_CHECKS=()
check_failed() {
	FAILED_CHECKS+=("$*")
	nlog "CHECK FAILED: $*"
}
mark() { printf '%s=%s\n' "$1" "$EPOCHREALTIME" >>"$KA_ARTIFACTS/timings.env"; }
# child CMD...: runs CMD (a program, not a function: cleanup stops that one process) in the background and waits for it, so that SIGTERM reaches the trap at
# once (bash runs traps only between foreground commands); cleanup stops a child still running.
child() {
	local rc=0
	"$@" &
	CHILD_PID=$!
	wait "$CHILD_PID" || rc=$?
	CHILD_PID=""
	return "$rc"
}

# --- 1. private folders ----------------------------------------------------------------------

overlay() {
	local target="$1" name="$2"
	mkdir -p "$KA_DIR/overlay/$name/upper" "$KA_DIR/overlay/$name/work"
	mount -t overlay "krs-kubeadm-$name" \
		-o "lowerdir=$target,upperdir=$KA_DIR/overlay/$name/upper,workdir=$KA_DIR/overlay/$name/work" "$target"
}

privatize() {
	local d
	overlay /etc etc
	if [[ ! -e /usr/lib/modules ]]; then
		mkdir -p "$KA_DIR/overlay/usrlib/upper/modules"
		overlay /usr/lib usrlib
	fi
	mount -t tmpfs -o mode=0755,nosuid,nodev krs-kubeadm-run /run
	mkdir -p /run/lock
	for d in "${KA_PRIVATE_DIRS[@]}"; do
		# run.sh made the ones the machine lacked: a folder that is not there would be created
		# on the machine's disk by whoever writes there first.
		[[ -d "$d" ]] || fail "$d does not exist on this machine: cannot make it private"
		mkdir -p "$KA_DIR/private$d"
		mount --bind "$KA_DIR/private$d" "$d"
	done
	chmod 0700 /var/lib/etcd
	e2e_private_sysctls "$KA_DIR/private/sysctl"
	printf '127.0.0.1 localhost\n::1 localhost\n%s %s\n' "$KA_NODE_IP" "$KA_NODE_NAME" >/etc/hosts
	printf '# kubelet-rs kubeadm node: no DNS server here\nnameserver 127.0.0.1\n' >/etc/resolv.conf
	mkdir -p /etc/kubernetes /etc/cni/net.d
	rm -f /etc/cni/net.d/*
	hostname "$KA_NODE_NAME"
}

# --- 2. network rules ------------------------------------------------------------------------

network_rules() {
	echo 1 >/proc/sys/net/ipv4/ip_forward
	ip route replace blackhole "$KA_SERVICE_SUBNET"
	iptables -w 5 -I FORWARD -s "$KA_POD_SUBNET" ! -d "$KA_POD_SUBNET" \
		-m comment --comment "kubelet-rs kubeadm node: pod traffic stays on the pod network" -j DROP
}

# --- 3. containerd ---------------------------------------------------------------------------

containerd_config() {
	cat <<EOF
# Written by e2e/kubeadm/node.sh: the kubeadm node's containerd, in the node's namespaces.
version = 2
root = "$CONTAINERD_DIR/root"
state = "/run/containerd"
oom_score = 0
required_plugins = ["io.containerd.grpc.v1.cri"]
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "$KA_CRI_SOCKET"
  tcp_address = ""

[ttrpc]
  address = "$KA_CRI_SOCKET.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CONTAINERD_DIR/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "k8s.gcr.io/pause:3.2"
    # This machine cannot lower oom_score_adj; without this no sandbox starts (TESTBED.md).
    restrict_oom_score_adj = true
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false

    # Where a network add-on puts its config: empty until the script installs one after init.
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "$CONTAINERD_DIR/certs.d"
EOF
}

start_containerd() {
	local registry deadline
	mkdir -p "$CONTAINERD_DIR/root"
	containerd_config >"$CONTAINERD_DIR/config.toml"
	# Nothing listens on port 1: a pull of an image that was not imported fails at once, locally.
	for registry in "${REGISTRIES[@]}"; do
		mkdir -p "$CONTAINERD_DIR/certs.d/$registry"
		printf 'server = "http://127.0.0.1:1"\n\n[host."http://127.0.0.1:1"]\n  capabilities = ["pull", "resolve"]\n' \
			>"$CONTAINERD_DIR/certs.d/$registry/hosts.toml"
	done
	nlog "starting containerd (log $LOGS/containerd.log)"
	setsid containerd --config "$CONTAINERD_DIR/config.toml" </dev/null >"$LOGS/containerd.log" 2>&1 &
	CONTAINERD_PID=$!
	deadline=$((SECONDS + 30))
	until [[ -S "$KA_CRI_SOCKET" ]] && timeout 5 ctr --address "$KA_CRI_SOCKET" version >/dev/null 2>&1; do
		kill -0 "$CONTAINERD_PID" 2>/dev/null || fail "containerd exited at start; see $LOGS/containerd.log"
		((SECONDS < deadline)) || fail "containerd not ready within 30 s"
		sleep 0.2
	done
}

import_images() {
	local tar names
	while read -r tar names; do
		timeout 120 ctr --address "$KA_CRI_SOCKET" -n k8s.io images import --all-platforms "$tar" >/dev/null ||
			fail "ctr images import $tar failed"
		nlog "imported $names"
	done <"$KA_IMAGES_LIST"
}

# --- 4. what a kubeadm node has installed ------------------------------------------------------

install_tools() {
	mkdir -p "$BIN_DIR"
	ln -sfn "$KA_KUBELET_BIN" "$BIN_DIR/kubelet"
	ln -sfn "$KA_UPSTREAM_BIN/kubeadm" "$BIN_DIR/kubeadm"
	ln -sfn "$KA_UPSTREAM_BIN/kubectl" "$BIN_DIR/kubectl"
	ln -sfn "$HERE/systemctl" "$BIN_DIR/systemctl"
	printf '#!/bin/sh\n# e2e/kubeadm: crictl stand-in (crictl.py says why)\nexec %q %q --stubs %q "$@"\n' \
		"$KA_PY" "$HERE/crictl.py" "$KA_STUBS" >"$BIN_DIR/crictl"
	chmod 0755 "$BIN_DIR/crictl"
	export PATH="$BIN_DIR:$PATH"
	# The kubeadm package's /etc/default/kubelet (empty unless the user adds flags).
	mkdir -p /etc/default
	printf 'KUBELET_EXTRA_ARGS=%s\n' "${KRS_KUBEADM_KUBELET_EXTRA_ARGS:-}" >/etc/default/kubelet
	export KUBECONFIG=/etc/kubernetes/admin.conf
}

kubeadm_config() {
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta2
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $KA_NODE_IP
  bindPort: 6443
nodeRegistration:
  name: $KA_NODE_NAME
  criSocket: $KA_CRI_SOCKET
  kubeletExtraArgs:
    # An explicit node IP (the test bed's network rule 4); kubeadm writes it to kubeadm-flags.env.
    node-ip: $KA_NODE_IP
---
apiVersion: kubeadm.k8s.io/v1beta2
kind: ClusterConfiguration
kubernetesVersion: $KA_KUBE_VERSION
clusterName: krs-kubeadm
networking:
  podSubnet: $KA_POD_SUBNET
  serviceSubnet: $KA_SERVICE_SUBNET
  dnsDomain: cluster.local
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroupfs for now: there is no systemd here (a systemd cgroup driver is being written
# separately); kubeadm v1.20 leaves the driver to the user anyway.
cgroupDriver: cgroupfs
# The node's pods go under a cgroup of their own, never under another kubelet's on this machine.
cgroupRoot: /$KA_CGROUP
# This machine's disk is often more than 85 % full (its builds and other tests): image GC would
# delete the imported images, which nothing can pull again, and the default eviction thresholds
# (imagefs.available<15%) would put the node under disk pressure. The same settings as e2e/run.sh.
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
# 0: leave the conntrack table size and timeouts alone (machine-wide settings).
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# --- 5.-7. ---------------------------------------------------------------------------------------

start_kubelet_service() {
	nlog "starting the kubelet service ($KA_KIND kubelet, log $LOGS/kubelet.log)"
	bash "$HERE/kubelet-service.sh" "$BIN_DIR/kubelet" "$LOGS/kubelet.log" </dev/null &
	SERVICE_PID=$!
}

stop_kubelet_service() {
	[[ -n "$SERVICE_PID" ]] || return 0
	e2e_stop_pid "$SERVICE_PID" kubelet-service.sh 40
	wait "$SERVICE_PID" 2>/dev/null || true
	SERVICE_PID=""
}

kubeadm_init() {
	local args=(init --config "$KUBEADM_CONFIG" -v=1)
	[[ -z "$KA_IGNORE_PREFLIGHT" ]] || args+=("--ignore-preflight-errors=$KA_IGNORE_PREFLIGHT")
	[[ -z "$KA_SKIP_PHASES" ]] || args+=("--skip-phases=$KA_SKIP_PHASES")
	printf 'kubeadm %s\n' "${args[*]}" >"$LOGS/kubeadm-init.cmd"
	nlog "kubeadm ${args[*]} (log $LOGS/kubeadm-init.log)"
	mark init_start
	if ! child kubeadm "${args[@]}" </dev/null >"$LOGS/kubeadm-init.log" 2>&1; then
		tail -n 25 "$LOGS/kubeadm-init.log" >&2
		fail "kubeadm init failed; see $LOGS/kubeadm-init.log and $LOGS/kubelet.log"
	fi
	mark init_done
	grep -E '^\s*\[WARNING|WARNING:|Your Kubernetes control-plane has initialized' "$LOGS/kubeadm-init.log" >&2 || true
	check_kubelet_finalize
}

# kubeadm's kubelet-finalize phase points kubelet.conf at the kubelet's rotatable client
# certificate (/var/lib/kubelet/pki/kubelet-client-current.pem) when the kubelet has written it, and
# restarts the kubelet. With rotateCertificates (kubeadm's default) a kubelet writes it: the
# upstream kubelet stores the kubeconfig's embedded pair there at start and rotates it. Without it
# kubelet.conf keeps the one-year certificate kubeadm embedded, which nothing renews.
check_kubelet_finalize() {
	grep -q '^rotateCertificates: true' /var/lib/kubelet/config.yaml || return 0
	if grep -q 'client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem' /etc/kubernetes/kubelet.conf; then
		nlog "kubelet-finalize: kubelet.conf points at the rotatable /var/lib/kubelet/pki/kubelet-client-current.pem"
	else
		check_failed "kubelet-finalize: the kubelet wrote no /var/lib/kubelet/pki/kubelet-client-current.pem by the end of init (rotateCertificates: true), so kubelet.conf keeps kubeadm's embedded one-year client certificate"
	fi
}

kubectl_() { kubectl --request-timeout=20s "$@"; }

install_cni() {
	local cidr="" deadline=$((SECONDS + 60))
	# kube-controller-manager's node IPAM gives it moments after the node registered.
	until cidr="$(kubectl_ get node "$KA_NODE_NAME" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null)" && [[ -n "$cidr" ]]; do
		((SECONDS < deadline)) || fail "node $KA_NODE_NAME got no podCIDR within 60 s"
		sleep 0.5
	done
	nlog "installing a CNI bridge config for the node's podCIDR $cidr in /etc/cni/net.d"
	cat >/etc/cni/net.d/.10-krs-kubeadm.conflist <<EOF
{
  "cniVersion": "0.4.0",
  "name": "krs-kubeadm",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$KA_CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$cidr" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
	# containerd watches the folder: never let it read a half-written file.
	mv /etc/cni/net.d/.10-krs-kubeadm.conflist /etc/cni/net.d/10-krs-kubeadm.conflist
}

node_ready() {
	[[ "$(kubectl_ get node "$KA_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

wait_ready() {
	local deadline=$((SECONDS + READY_TIMEOUT_S))
	until node_ready; do
		((SECONDS < deadline)) || {
			kubectl_ describe node "$KA_NODE_NAME" >"$LOGS/node-describe.txt" 2>&1 || true
			fail "node $KA_NODE_NAME not Ready within ${READY_TIMEOUT_S}s; see $LOGS/node-describe.txt"
		}
		sleep 0.5
	done
	mark ready
	nlog "node Ready: $(kubectl_ get node "$KA_NODE_NAME" --no-headers -o wide | awk '{ print $2, $5, $6 }')"
}

deployment() {
	cat <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: hello
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: { app: hello }
  template:
    metadata:
      labels: { app: hello }
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: hello
        image: docker.io/library/busybox:1.36
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "echo hello from $(hostname); trap 'exit 0' TERM; while true; do sleep 1; done"]
EOF
}

run_workload() {
	nlog "removing the control-plane taint; running Deployment hello"
	kubectl_ taint node "$KA_NODE_NAME" node-role.kubernetes.io/master:NoSchedule- >&2
	deployment | kubectl_ apply -f - >&2
	child kubectl --request-timeout=20s rollout status deployment/hello --timeout=180s >&2 ||
		{
			kubectl_ describe pods -l app=hello >"$LOGS/hello-describe.txt" 2>&1 || true
			fail "Deployment hello not available within 180 s; see $LOGS/hello-describe.txt"
		}
	local pod out deadline=$((SECONDS + 30))
	pod="$(kubectl_ get pods -l app=hello -o 'jsonpath={.items[0].metadata.name}')"
	until out="$(kubectl_ logs "$pod" 2>&1)" && [[ "$out" == *"hello from $pod"* ]]; do
		((SECONDS < deadline)) || fail "kubectl logs $pod: expected 'hello from $pod', got: $out"
		sleep 1
	done
	nlog "kubectl logs $pod: $out"
	out="$(kubectl_ exec "$pod" -- sh -c 'echo exec in $(hostname) as $(id -u)' 2>&1)" ||
		fail "kubectl exec $pod failed: $out"
	[[ "$out" == "exec in $pod as 0" ]] || fail "kubectl exec $pod: unexpected output: $out"
	nlog "kubectl exec $pod: $out"
	mark workload
}

# The control plane's mirror pods (the kubelet creates them for its static pods; kubeadm reset
# finds etcd's address in etcd's) and kube-proxy's pod exist, and every kube-system pod is Running
# and Ready.
check_system_pods() {
	local deadline=$((SECONDS + 120)) bad listing c
	while :; do
		listing="$(kubectl_ -n kube-system get pods --no-headers 2>&1)" || listing=""
		bad="$(awk '{ split($2, r, "/"); if ($3 != "Running" || r[1] != r[2]) print $1, $2, $3 }' <<<"$listing")"
		for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
			grep -q "^$c-$KA_NODE_NAME " <<<"$listing" || bad+=" no mirror pod $c-$KA_NODE_NAME;"
		done
		grep -q "^kube-proxy-" <<<"$listing" || bad+=" no kube-proxy pod;"
		[[ -n "$bad" ]] || break
		((SECONDS < deadline)) || {
			kubectl_ -n kube-system describe pods >"$LOGS/kube-system-describe.txt" 2>&1 || true
			fail "kube-system pods not running and ready: $bad; see $LOGS/kube-system-describe.txt"
		}
		sleep 2
	done
	kubectl_ get pods -A -o wide >"$LOGS/pods.txt" 2>&1
	nlog "kube-system: $(kubectl_ -n kube-system get pods --no-headers | awk '{ printf "%s %s %s; ", $1, $2, $3 }')"
}

# The kubelet crashes (SIGKILL); the unit restarts it after RestartSec. The restarted kubelet
# must adopt what runs: no container restarted or replaced (the same container IDs and restart
# counts in every pod's status), the node Ready, `kubectl exec` working again.
check_kubelet_restart() {
	local listing before after pid state deadline out pod
	listing='{range .items[*]}{.metadata.namespace}/{.metadata.name}:{range .status.containerStatuses[*]} {.containerID}/{.restartCount}{end}{"\n"}{end}'
	before="$(kubectl_ get pods -A -o "jsonpath=$listing" | sort)"
	state="$(cat /run/krs-kubelet-service/state)"
	pid="${state#active }"
	[[ "$state" == active* && "$pid" =~ ^[0-9]+$ ]] || {
		check_failed "kubelet restart: the unit is not active ($state)"
		return 0
	}
	nlog "kubelet crash: SIGKILL to pid $pid; the unit restarts it in ${KRS_KUBEADM_RESTART_SEC:-10}s"
	kill -KILL "$pid"
	mark crash
	deadline=$((SECONDS + ${KRS_KUBEADM_RESTART_SEC:-10} + 60))
	pod="$(kubectl_ get pods -l app=hello -o 'jsonpath={.items[0].metadata.name}')"
	until state="$(cat /run/krs-kubelet-service/state)" && [[ "$state" == active* && "$state" != "active $pid" ]] &&
		curl -fsS --max-time 2 http://127.0.0.1:10248/healthz >/dev/null 2>&1 && node_ready &&
		out="$(kubectl_ exec "$pod" -- true 2>&1)"; do
		((SECONDS < deadline)) || {
			check_failed "kubelet restart: not back (unit $state, node Ready, kubectl exec) within $((${KRS_KUBEADM_RESTART_SEC:-10} + 60)) s: ${out:-}"
			return 0
		}
		sleep 0.5
	done
	mark restarted
	# What the restarted kubelet reports once it has looked at everything.
	sleep 5
	after="$(kubectl_ get pods -A -o "jsonpath=$listing" | sort)"
	if [[ "$before" == "$after" ]]; then
		nlog "kubelet restarted (${state#active }): every container adopted, none restarted; node Ready; exec works"
	else
		diff <(printf '%s\n' "$before") <(printf '%s\n' "$after") >"$LOGS/restart-diff.txt"
		check_failed "kubelet restart: containers restarted or replaced: $(grep '^[<>]' "$LOGS/restart-diff.txt" | head -n 6 | tr '\n' ' ')"
	fi
}

# --- 8. reset ----------------------------------------------------------------------------------

kubeadm_reset() {
	nlog "kubeadm reset -f (it stops the kubelet with systemctl stop kubelet)"
	mark reset_start
	child kubeadm reset -f --cri-socket "$KA_CRI_SOCKET" -v=1 </dev/null >"$LOGS/kubeadm-reset.log" 2>&1 ||
		fail "kubeadm reset -f failed; see $LOGS/kubeadm-reset.log"
	mark reset_done
	# kubeadm reset: "The reset process does not clean CNI configuration": the user's part.
	rm -f /etc/cni/net.d/10-krs-kubeadm.conflist
	local left=() m
	while read -r m; do left+=("file $m"); done < <(find /etc/kubernetes /var/lib/kubelet /var/lib/etcd -mindepth 1 ! -type d 2>/dev/null)
	while read -r m; do left+=("mount $m"); done < <(awk '{ print $5 }' /proc/self/mountinfo | grep '^/var/lib/kubelet/' || true)
	while read -r m; do left+=("pod sandbox $m"); done < <(crictl -r "unix://$KA_CRI_SOCKET" pods -q 2>/dev/null)
	while read -r m; do left+=("container $m"); done < <(ctr --address "$KA_CRI_SOCKET" -n k8s.io containers ls -q 2>/dev/null)
	if ((${#left[@]})); then
		printf '%s\n' "${left[@]}" >"$LOGS/left-after-reset.txt"
		fail "left after kubeadm reset -f: ${left[*]:0:8}"
	fi
	nlog "after kubeadm reset -f: no file in /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, no mount, no pod"
}

# --- 9. teardown -------------------------------------------------------------------------------

# Processes of this mount namespace whose command line contains WORD: only ours can be in it.
ns_pids() {
	local mine pid
	mine="$(readlink /proc/self/ns/mnt)"
	for pid in /proc/[0-9]*; do
		pid="${pid#/proc/}"
		[[ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" == "$mine" ]] || continue
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1" && printf '%s\n' "$pid"
	done
	return 0
}

stop_containerd() {
	local ns task pid id
	[[ -n "$CONTAINERD_PID" ]] || return 0
	cp -f "$LOGS/containerd.log" "$LOGS/containerd.log.bak" 2>/dev/null || true
	for ns in $(timeout 10 ctr --address "$KA_CRI_SOCKET" namespaces ls -q 2>/dev/null); do
		for task in $(timeout 10 ctr --address "$KA_CRI_SOCKET" -n "$ns" tasks ls -q 2>/dev/null); do
			timeout 10 ctr --address "$KA_CRI_SOCKET" -n "$ns" tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
		done
	done
	e2e_stop_pid "$CONTAINERD_PID" containerd 15
	# Shims outlive their daemon (their own sessions): ours carry our socket and live in this
	# mount namespace.
	for pid in $(ns_pids "containerd-shim"); do kill -KILL "$pid" 2>/dev/null || true; done
	if [[ -d /run/containerd/runc/k8s.io ]]; then
		for id in $(runc --root /run/containerd/runc/k8s.io list -q 2>/dev/null); do
			runc --root /run/containerd/runc/k8s.io kill --all "$id" KILL >/dev/null 2>&1 || true
			runc --root /run/containerd/runc/k8s.io delete -f "$id" >/dev/null 2>&1 || true
		done
	fi
	rm -f "$LOGS/containerd.log.bak"
	CONTAINERD_PID=""
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT TERM INT
	[[ -s "$KA_ARTIFACTS/verdict" ]] || { ((rc == 0)) && echo ok || echo "node.sh exited with status $rc"; } >"$KA_ARTIFACTS/verdict"
	nlog "taking the node down"
	if [[ -n "$CHILD_PID" ]]; then
		kill -TERM "$CHILD_PID" 2>/dev/null
		wait "$CHILD_PID" 2>/dev/null
	fi
	stop_kubelet_service
	# The kubelet-service.sh loop is gone; a kubelet it started must be too.
	local pid
	for pid in $(ns_pids "$BIN_DIR/kubelet"); do e2e_stop_pid "$pid" "$BIN_DIR/kubelet" 10; done
	stop_containerd
	cp -a /etc/kubernetes "$LOGS/etc-kubernetes-at-exit" 2>/dev/null
	nlog "node down"
	exit "$rc"
}

main() {
	local v
	for v in KA_KIND KA_KUBELET_BIN KA_ARTIFACTS KA_IMAGES_LIST KA_PY KA_STUBS; do
		[[ -n "${!v:-}" ]] || e2e_die "$v not set: node.sh is started by e2e/kubeadm/run.sh"
	done
	LOGS="$KA_ARTIFACTS"
	trap cleanup EXIT
	trap 'exit 143' TERM
	trap 'exit 130' INT
	mark node_start
	privatize
	network_rules
	start_containerd
	import_images
	install_tools
	kubeadm_config >"$KUBEADM_CONFIG"
	cp "$KUBEADM_CONFIG" "$LOGS/kubeadm-config.yaml"
	start_kubelet_service
	kubeadm_init
	install_cni
	wait_ready
	run_workload
	check_system_pods
	check_kubelet_restart
	kubeadm_reset
	mark node_done
	if ((${#FAILED_CHECKS[@]})); then
		printf 'failed: %s\n' "${FAILED_CHECKS[@]}" >"$KA_ARTIFACTS/verdict"
		exit 1
	fi
	echo ok >"$KA_ARTIFACTS/verdict"
}

main "$@"
