#!/usr/bin/env bash
# Usage: hack/cluster/smoke.sh [--upstream-kubelet | --our-kubelet] [--bench N] [--bench-csi N]
#                              [--bench-guaranteed N] [--keep] [NAME]
#
# Proves that the local control plane NAME (default "krs") does what kubelet tests need. Starts
# it with up.sh when it does not run (and leaves it running). Checks, against the real apiserver:
#   - /readyz is ok and the four standard namespaces exist;
#   - a Deployment of one busybox pod (pinned to node $KRS_SMOKE_NODE) stays Pending and the
#     scheduler says why (no node, or no matching node);
#   - with the bootstrap kubeconfig, a CSR for system:node:<node> (signer
#     kubernetes.io/kube-apiserver-client-kubelet) is auto-approved and issued by the cluster CA;
#   - a kubeconfig from kubelet-kubeconfig.sh may create its own Node and no other.
# With --upstream-kubelet it then runs the upstream kubelet v1.20.2 as node $KRS_SMOKE_NODE: TLS
# bootstrap from the bootstrap kubeconfig, its own containerd (hack/testbed, instance
# $KRS_SMOKE_INSTANCE), waits for the node to be Ready, the Deployment's pod to run, and for
# `kubectl logs` and `kubectl exec` to work through the apiserver; then removes it all again.
# --our-kubelet does the same with this project's kubelet (KRS_OUR_KUBELET, default the release
# build under $CARGO_TARGET_DIR) and the very same flags. --bench N then times N rounds of
# `kubectl exec -- true`, `kubectl logs` and a raw GET of the pod's log through the apiserver
# and prints the median and 90th percentile in milliseconds (hack/bench-api runs both kubelets).
# --bench-csi N starts a CSI driver on the node (tests/grpc/csi_driver.py, in the grpcio venv of
# hack/testbed/grpcio-venv.sh: folders bind-mounted), creates N claims bound to N CSI
# PersistentVolumes, then N pods at once that each mount one, and prints how long each took
# from its creation to Running (median, 90th percentile, slowest) and how long all N took to be
# deleted again, their volumes unpublished and unstaged (hack/bench-csi runs both kubelets).
# --bench-guaranteed N runs the kubelet with the static CPU manager (CPU 0 reserved; needs two
# CPUs) beside a device plugin (tests/grpc/device_plugin.py, same venv) and times N rounds of one
# Guaranteed pod holding one device and one exclusive CPU: from its creation to Running, then
# its deletion until it is gone; the first round checks the container's CPU list and device env
# (hack/bench-guaranteed runs both kubelets). /var/lib/kubelet/device-plugins is private too.
# That part runs in a private mount namespace: /var/log/pods, /var/log/containers, /etc/hosts
# (with "<node ip> <node>") and the sysctls the kubelet adjusts are private copies.
# --keep leaves the Deployment, Node and CSRs in the cluster (the kubelet is stopped regardless).
#
# Env: KRS_SMOKE_NODE (default test-node), KRS_SMOKE_INSTANCE (containerd instance, default
# clsmoke), KRS_SMOKE_TIMEOUT (seconds per wait, default 180), KRS_NODE_IP.
# Exit status 0 only if every check passed.
# shellcheck disable=SC2015 # "A && pass || fail" is safe: pass always succeeds.
set -euo pipefail

SELF="$(readlink -f "$0")"
HERE="$(dirname "$SELF")"
# shellcheck source=hack/cluster/lib.sh
source "$HERE/lib.sh"

NODE="${KRS_SMOKE_NODE:-test-node}"
INSTANCE="${KRS_SMOKE_INSTANCE:-clsmoke}"
TIMEOUT_S="${KRS_SMOKE_TIMEOUT:-180}"
KUBELET_BIN="$KRS_CL_BIN_DIR/kubelet"
KUBELET_KIND=upstream
BENCH_ROUNDS=0
BENCH_CSI=0
BENCH_GUARANTEED=0
DEVICE_RESOURCE=bench.kubelet-rs.io/device
DEVICE_PLUGIN_PID=""
CSI_DRIVER_NAME=bench.csi.kubelet-rs.io
CSI_DRIVER_PID=""
KUBELET_PORT=10450
KUBELET_HEALTHZ_PORT=10448
DEPLOYMENT=smoke-busybox
IMAGE=docker.io/library/busybox:1.36
TESTBED="$KRS_CL_REPO_ROOT/hack/testbed"
# The kubelet writes these at start; in our namespace it writes private copies.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
	kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

FAILED=0
pass() { printf '[smoke] PASS %s\n' "$*" >&2; }
fail() {
	printf '[smoke] FAIL %s\n' "$*" >&2
	FAILED=1
}
k() { kubectl --kubeconfig "$CL_ADMIN_CONF" --request-timeout=20s "$@"; }

# poll SECONDS CMD...: runs CMD until it succeeds; fails after SECONDS.
poll() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

usage() { echo "usage: $0 [--upstream-kubelet | --our-kubelet] [--bench N] [--bench-csi N] [--bench-guaranteed N] [--keep] [NAME]" >&2; }

# --- API checks ----------------------------------------------------------------------------------

check_ready() {
	local out
	out="$(k get --raw /readyz 2>&1)" || true
	[[ "$out" == ok ]] && pass "/readyz: ok" || fail "/readyz: $out"
	local ns
	for ns in default kube-system kube-public kube-node-lease; do
		k get namespace "$ns" >/dev/null 2>&1 && pass "namespace $ns exists" || fail "namespace $ns missing"
	done
}

deployment_yaml() {
	cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $DEPLOYMENT
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: $DEPLOYMENT}
  template:
    metadata:
      labels: {app: $DEPLOYMENT}
    spec:
      nodeSelector: {kubernetes.io/hostname: $NODE}
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: $IMAGE
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "echo smoke-hello-from-\$(hostname); trap 'exit 0' TERM; while true; do sleep 1; done"]
EOF
}

# The scheduler's latest complaint about the deployment's pod.
scheduling_failure() {
	local pod
	pod="$(k get pods -l "app=$DEPLOYMENT" -o 'jsonpath={.items[0].metadata.name}')"
	[[ -n "$pod" ]] || return 1
	k get events -n default --field-selector "reason=FailedScheduling,involvedObject.name=$pod" \
		-o 'jsonpath={.items[-1:].message}'
}

scheduler_complained() {
	scheduling_failure | grep -Eq 'no nodes available|didn.t match'
}

check_pending_deployment() {
	k delete deployment "$DEPLOYMENT" --ignore-not-found --wait=true >/dev/null 2>&1 || true
	deployment_yaml | k apply -f - >/dev/null || {
		fail "cannot create deployment $DEPLOYMENT"
		return
	}
	if k get node "$NODE" >/dev/null 2>&1; then
		pass "deployment created (node $NODE exists already: not checking Pending)"
		return
	fi
	if poll 60 scheduler_complained; then
		local phase
		phase="$(k get pods -l "app=$DEPLOYMENT" -o 'jsonpath={.items[*].status.phase}')"
		[[ "$phase" == Pending ]] && pass "deployment's pod Pending; scheduler: $(scheduling_failure)" ||
			fail "deployment's pod phase '$phase', wanted Pending"
	else
		fail "no FailedScheduling event for the pending pod"
	fi
}

csr_issued() {
	[[ -n "$(kubectl --kubeconfig "$CL_BOOTSTRAP_CONF" --request-timeout=20s get csr "$1" \
		-o 'jsonpath={.status.certificate}')" ]]
}

check_bootstrap_csr() {
	local work csr="smoke-csr-$RANDOM"
	work="$(mktemp -d)"
	openssl genrsa -out "$work/node.key" 2048 2>/dev/null
	openssl req -new -key "$work/node.key" -subj "/O=system:nodes/CN=system:node:$NODE" -out "$work/node.csr"
	cat >"$work/csr.yaml" <<EOF
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: $csr
spec:
  signerName: kubernetes.io/kube-apiserver-client-kubelet
  usages: [digital signature, key encipherment, client auth]
  request: $(base64 -w0 "$work/node.csr")
EOF
	if ! kubectl --kubeconfig "$CL_BOOTSTRAP_CONF" --request-timeout=20s create -f "$work/csr.yaml" >/dev/null; then
		fail "bootstrap token cannot create a CSR"
	elif ! poll 60 csr_issued "$csr"; then
		fail "CSR $csr not issued: $(k get csr "$csr" --no-headers 2>&1)"
	else
		kubectl --kubeconfig "$CL_BOOTSTRAP_CONF" --request-timeout=20s get csr "$csr" \
			-o 'jsonpath={.status.certificate}' | base64 -d >"$work/node.crt"
		local subject conditions
		subject="$(openssl x509 -in "$work/node.crt" -noout -subject -nameopt compat)"
		conditions="$(k get csr "$csr" -o 'jsonpath={.status.conditions[*].type}')"
		if openssl verify -CAfile "$CL_PKI/ca.crt" "$work/node.crt" >/dev/null 2>&1 &&
			[[ "$subject" == *"O=system:nodes"*"CN=system:node:$NODE"* && "$conditions" == *Approved* ]]; then
			pass "bootstrap CSR auto-approved ($conditions) and issued: $subject"
		else
			fail "CSR $csr: conditions '$conditions', subject '$subject'"
		fi
	fi
	[[ $KEEP == 1 ]] || k delete csr "$csr" --ignore-not-found >/dev/null 2>&1 || true
	rm -rf "$work"
}

check_node_kubeconfig() {
	local work node="smoke-api-node" answer
	work="$(mktemp -d)"
	"$HERE/kubelet-kubeconfig.sh" "$CL_NAME" "$node" "$work/kubelet.conf" 2>/dev/null
	answer="$(kubectl --kubeconfig "$work/kubelet.conf" --request-timeout=20s auth can-i create nodes 2>/dev/null)" || true
	[[ "$answer" == yes ]] && pass "system:node:$node can create nodes" || fail "can-i create nodes: '$answer'"
	k delete node "$node" --ignore-not-found >/dev/null 2>&1 || true
	printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s\n' "$node" |
		kubectl --kubeconfig "$work/kubelet.conf" --request-timeout=20s create -f - >/dev/null 2>&1 &&
		pass "system:node:$node created Node $node" || fail "system:node:$node cannot create its Node"
	if printf 'apiVersion: v1\nkind: Node\nmetadata:\n  name: %s-other\n' "$node" |
		kubectl --kubeconfig "$work/kubelet.conf" --request-timeout=20s create -f - >/dev/null 2>&1; then
		fail "system:node:$node could create another node (NodeRestriction off?)"
		k delete node "$node-other" --ignore-not-found >/dev/null 2>&1 || true
	else
		pass "system:node:$node may not create another node"
	fi
	k delete node "$node" --ignore-not-found >/dev/null 2>&1 || true
	rm -rf "$work"
}

# --- a node kubelet (runs inside the private mount namespace) ------------------------------------

KUBELET_PID=""
CONTAINERD_UP=0
NODE_IP=""
KDIR=""

privatize() {
	local dir="$KDIR/private" key f
	mkdir -p "$dir/sysctl" "$dir/pod-logs" "$dir/container-logs" /var/log/pods /var/log/containers
	for key in "${SYSCTLS[@]}"; do
		[[ -e "/proc/sys/$key" ]] || continue
		f="$dir/sysctl/${key//\//.}"
		cat "/proc/sys/$key" >"$f"
		mount --bind "$f" "/proc/sys/$key"
	done
	{
		cat /etc/hosts
		printf '%s %s\n' "$NODE_IP" "$NODE"
	} >"$dir/hosts"
	mount --bind "$dir/hosts" /etc/hosts
	mount --bind "$dir/pod-logs" /var/log/pods
	mount --bind "$dir/container-logs" /var/log/containers
	if ((BENCH_GUARANTEED > 0)); then
		# Both kubelets serve device plugins in this fixed folder only.
		mkdir -p "$dir/device-plugins" /var/lib/kubelet/device-plugins
		mount --bind "$dir/device-plugins" /var/lib/kubelet/device-plugins
	fi
}

cgroup_dirs() {
	awk '$9 == "cgroup" || $9 == "cgroup2" { print $5 }' /proc/self/mountinfo
}

remove_cgroup_root() {
	local m
	while read -r m; do
		[[ -d "$m/$1" ]] || continue
		find "$m/$1" -depth -type d -exec rmdir {} + 2>/dev/null ||
			printf '[smoke] cgroup %s/%s still busy; left in place\n' "$m" "$1" >&2
	done < <(cgroup_dirs)
}

stop_kubelet() {
	[[ -n "$KUBELET_PID" ]] || return 0
	kill -TERM "$KUBELET_PID" 2>/dev/null || true
	local i=0
	while kill -0 "$KUBELET_PID" 2>/dev/null && ((i++ < 40)); do sleep 0.5; done
	kill -KILL "$KUBELET_PID" 2>/dev/null || true
	wait "$KUBELET_PID" 2>/dev/null || true
	KUBELET_PID=""
}

pods_gone() {
	[[ -z "$(k get pods -l "app=$DEPLOYMENT" -o name)" ]]
}

cleanup_kubelet() {
	set +e
	if [[ -n "$KUBELET_PID" && $KEEP != 1 ]]; then
		# Let the kubelet tear its pods down properly (volumes unpublished) before it goes.
		k delete deployment "$DEPLOYMENT" --ignore-not-found --wait=false >/dev/null 2>&1
		k delete pods -l app=bench-csi --ignore-not-found --wait=false >/dev/null 2>&1
		k delete pods -l app=bench-gu --ignore-not-found --wait=false >/dev/null 2>&1
		poll 60 pods_gone
		poll 60 gu_pods_gone
		poll 120 csi_pods_gone
	fi
	((BENCH_CSI == 0)) || remove_csi_objects
	stop_kubelet
	if [[ -n "$DEVICE_PLUGIN_PID" ]]; then
		kill -TERM "$DEVICE_PLUGIN_PID" 2>/dev/null
		wait "$DEVICE_PLUGIN_PID" 2>/dev/null
	fi
	if [[ -n "$CSI_DRIVER_PID" ]]; then
		kill -TERM "$CSI_DRIVER_PID" 2>/dev/null
		wait "$CSI_DRIVER_PID" 2>/dev/null
	fi
	if ((CONTAINERD_UP)); then
		"$TESTBED/containerd.sh" stop "$INSTANCE" >&2
	fi
	[[ $KEEP == 1 ]] || k delete node "$NODE" --ignore-not-found >/dev/null 2>&1
	# Volumes the kubelet mounted live in this namespace only; unmount them before deleting.
	awk -v d="$KDIR" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null; done
	remove_cgroup_root "kubelet-rs-smoke-$INSTANCE"
	[[ -z "$KDIR" ]] || rm -rf --one-file-system "$KDIR/root"
}

node_ready() {
	[[ "$(k get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

pod_running() {
	[[ "$(k get pods -l "app=$DEPLOYMENT" -o 'jsonpath={.items[*].status.phase}')" == Running ]]
}

logs_say_hello() {
	k logs "deployment/$DEPLOYMENT" | grep -q '^smoke-hello-from-'
}

# stats NAME MS...: prints the median and 90th percentile of the samples.
stats() {
	local name="$1"
	shift
	printf '%s\n' "$@" | sort -n | awk -v name="$name" -v kind="$KUBELET_KIND" '
		{ v[NR] = $1 }
		END {
			p50 = v[int((NR + 1) / 2)]; p90 = v[int(NR * 0.9 + 0.999)]
			printf "[bench] %-9s %-28s n=%d median=%dms p90=%dms\n", kind, name, NR, p50, p90
		}'
}

# time_ms CMD...: runs CMD (output discarded) and prints how long it took in milliseconds.
time_ms() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 || printf '[bench] failed: %s\n' "$*" >&2
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000000))
}

bench_api() {
	local pod i exec=() logs=() raw=() direct=() url container kubelet_url
	cl_load_ports
	pod="$(k get pods -l "app=$DEPLOYMENT" -o 'jsonpath={.items[0].metadata.name}')"
	container="$(k get pod "$pod" -o 'jsonpath={.spec.containers[0].name}')"
	url="$CL_APISERVER_URL/api/v1/namespaces/default/pods/$pod/log"
	# The same request straight to the kubelet, as the apiserver sends it: the kubelet's own share.
	kubelet_url="https://$NODE_IP:$KUBELET_PORT/containerLogs/default/$pod/$container"
	# Warm-up: the first exec pays for connections and caches on both sides.
	time_ms k exec "$pod" -- true >/dev/null
	for ((i = 0; i < BENCH_ROUNDS; i++)); do
		exec+=("$(time_ms k exec "$pod" -- true)")
		logs+=("$(time_ms k logs "$pod")")
		raw+=("$(time_ms curl -sf --cacert "$CL_PKI/ca.crt" --cert "$CL_PKI/admin.crt" \
			--key "$CL_PKI/admin.key" "$url")")
		direct+=("$(time_ms curl -sfk --cert "$CL_PKI/apiserver-kubelet-client.crt" \
			--key "$CL_PKI/apiserver-kubelet-client.key" "$kubelet_url")")
	done
	stats "kubectl exec -- true" "${exec[@]}"
	stats "kubectl logs" "${logs[@]}"
	stats "GET pods/log (curl)" "${raw[@]}"
	stats "GET containerLogs (kubelet)" "${direct[@]}"
}

csi_pods_gone() {
	[[ -z "$(k get pods -l app=bench-csi -o name)" ]]
}

remove_csi_objects() {
	local i
	for ((i = 0; i < BENCH_CSI; i++)); do
		k delete pvc "bench-csi-pvc-$i" --ignore-not-found --wait=false >/dev/null 2>&1
		k delete pv "bench-csi-pv-$i" --ignore-not-found --wait=false >/dev/null 2>&1
	done
	k delete csidriver "$CSI_DRIVER_NAME" --ignore-not-found >/dev/null 2>&1
}

csi_driver_registered() {
	[[ " $(k get csinode "$NODE" -o 'jsonpath={.spec.drivers[*].name}') " == *" $CSI_DRIVER_NAME "* ]]
}

csi_claims_bound() {
	[[ "$(k get pvc -l app=bench-csi -o 'jsonpath={.items[*].status.phase}' | tr ' ' '\n' |
		grep -c '^Bound$')" == "$BENCH_CSI" ]]
}

# csi_objects: N CSI PersistentVolumes, each reserved for its claim, and the claims.
csi_objects() {
	local i
	for ((i = 0; i < BENCH_CSI; i++)); do
		cat <<-EOF
			apiVersion: v1
			kind: PersistentVolume
			metadata: {name: bench-csi-pv-$i, labels: {app: bench-csi}}
			spec:
			  capacity: {storage: 1Mi}
			  accessModes: [ReadWriteOnce]
			  storageClassName: ""
			  persistentVolumeReclaimPolicy: Retain
			  claimRef: {namespace: default, name: bench-csi-pvc-$i}
			  csi: {driver: $CSI_DRIVER_NAME, volumeHandle: bench-$i}
			---
			apiVersion: v1
			kind: PersistentVolumeClaim
			metadata: {name: bench-csi-pvc-$i, namespace: default, labels: {app: bench-csi}}
			spec:
			  accessModes: [ReadWriteOnce]
			  storageClassName: ""
			  volumeName: bench-csi-pv-$i
			  resources: {requests: {storage: 1Mi}}
			---
		EOF
	done
}

csi_pods() {
	local i
	for ((i = 0; i < BENCH_CSI; i++)); do
		cat <<-EOF
			apiVersion: v1
			kind: Pod
			metadata: {name: bench-csi-$i, namespace: default, labels: {app: bench-csi}}
			spec:
			  nodeName: $NODE
			  terminationGracePeriodSeconds: 1
			  containers:
			  - name: main
			    image: $IMAGE
			    imagePullPolicy: IfNotPresent
			    command: [sh, -c, "echo ok > /data/started && exec sleep 3600"]
			    volumeMounts: [{name: data, mountPath: /data}]
			  volumes: [{name: data, persistentVolumeClaim: {claimName: bench-csi-pvc-$i}}]
			---
		EOF
	done
}

bench_csi() {
	local python
	python="$("$TESTBED/grpcio-venv.sh")"
	"$python" "$KRS_CL_REPO_ROOT/tests/grpc/csi_driver.py" "$KRS_CL_REPO_ROOT" --name "$CSI_DRIVER_NAME" \
		--dir "$KDIR/csi" --registry "$KDIR/root/plugins_registry" >"$KDIR/csi-driver.log" 2>&1 &
	CSI_DRIVER_PID=$!
	remove_csi_objects
	printf 'apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: %s}\nspec: {attachRequired: false, podInfoOnMount: false}\n' \
		"$CSI_DRIVER_NAME" | k create -f - >/dev/null
	poll 60 csi_driver_registered || {
		fail "$CSI_DRIVER_NAME not in CSINode $NODE; see $KDIR/csi-driver.log"
		return
	}
	csi_objects | k create -f - >/dev/null
	poll 120 csi_claims_bound || {
		fail "the bench's $BENCH_CSI claims did not bind"
		return
	}
	# Every pod created at once; each one's time is from that moment to the watch event that
	# first shows it Running, stamped as it arrives.
	local t0 now name phase deadline started=() seen="" n=0
	coproc WATCH {
		exec kubectl --kubeconfig "$CL_ADMIN_CONF" --request-timeout=0 get pods -l app=bench-csi \
			--watch -o 'jsonpath={.metadata.name} {.status.phase}{"\n"}' 2>/dev/null
	}
	sleep 1
	t0=${EPOCHREALTIME/./}
	csi_pods | k create -f - >/dev/null
	deadline=$((SECONDS + TIMEOUT_S))
	while ((n < BENCH_CSI && SECONDS < deadline)); do
		if ! read -r -t 5 name phase <&"${WATCH[0]}"; then
			kill -0 "$WATCH_PID" 2>/dev/null && continue
			break
		fi
		now=${EPOCHREALTIME/./}
		[[ "$phase" == Running && " $seen " != *" $name "* ]] || continue
		seen+=" $name"
		started+=("$(((now - t0) / 1000))")
		n=$((n + 1))
	done
	kill "$WATCH_PID" 2>/dev/null || true
	wait "$WATCH_PID" 2>/dev/null || true
	if ((n < BENCH_CSI)); then
		fail "only $n of $BENCH_CSI CSI pods ran within ${TIMEOUT_S}s; see $KDIR/kubelet.log"
		return
	fi
	stats "CSI pod start ($BENCH_CSI pods)" "${started[@]}"
	printf '[bench] %-9s %-28s %dms\n' "$KUBELET_KIND" "CSI pods all running" "${started[-1]}"
	t0=${EPOCHREALTIME/./}
	k delete pods -l app=bench-csi --wait=false >/dev/null
	deadline=$((SECONDS + TIMEOUT_S))
	until csi_pods_gone && no_csi_mounts; do
		if ((SECONDS >= deadline)); then
			fail "the CSI pods or their mounts did not go; see $KDIR/kubelet.log"
			return
		fi
		sleep 0.2
	done
	now=${EPOCHREALTIME/./}
	printf '[bench] %-9s %-28s %dms\n' "$KUBELET_KIND" "CSI pods all deleted" "$(((now - t0) / 1000))"
}

gu_pods_gone() {
	[[ -z "$(k get pods -l app=bench-gu -o name)" ]]
}

gu_pod() {
	cat <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: $1, namespace: default, labels: {app: bench-gu}}
		spec:
		  nodeName: $NODE
		  terminationGracePeriodSeconds: 1
		  containers:
		  - name: main
		    image: $IMAGE
		    imagePullPolicy: IfNotPresent
		    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
		    resources:
		      requests: {cpu: "1", memory: 64Mi, $DEVICE_RESOURCE: "1"}
		      limits: {cpu: "1", memory: 64Mi, $DEVICE_RESOURCE: "1"}
	EOF
}

devices_allocatable() {
	[[ "$(k get node "$NODE" -o "jsonpath={.status.allocatable.${DEVICE_RESOURCE//./\\.}}")" == 4 ]]
}

bench_guaranteed() {
	local python
	python="$("$TESTBED/grpcio-venv.sh")"
	"$python" "$KRS_CL_REPO_ROOT/tests/grpc/device_plugin.py" "$KRS_CL_REPO_ROOT" \
		--dir /var/lib/kubelet/device-plugins --resource "$DEVICE_RESOURCE" --count 4 \
		>"$KDIR/device-plugin.log" 2>&1 &
	DEVICE_PLUGIN_PID=$!
	poll 60 devices_allocatable || {
		fail "$DEVICE_RESOURCE not allocatable on $NODE; see $KDIR/device-plugin.log"
		return
	}
	local i t0 now name phase deadline started=() deleted=() ran
	for ((i = 0; i < BENCH_GUARANTEED; i++)); do
		coproc WATCH {
			exec kubectl --kubeconfig "$CL_ADMIN_CONF" --request-timeout=0 get pods -l app=bench-gu \
				--watch -o 'jsonpath={.metadata.name} {.status.phase}{"\n"}' 2>/dev/null
		}
		sleep 1
		t0=${EPOCHREALTIME/./}
		gu_pod "bench-gu-$i" | k create -f - >/dev/null
		deadline=$((SECONDS + TIMEOUT_S))
		ran=0
		while ((SECONDS < deadline)); do
			if ! read -r -t 5 name phase <&"${WATCH[0]}"; then
				kill -0 "$WATCH_PID" 2>/dev/null && continue
				break
			fi
			[[ "$name" == "bench-gu-$i" ]] || continue
			if [[ "$phase" == Failed ]]; then
				break
			fi
			if [[ "$phase" == Running ]]; then
				now=${EPOCHREALTIME/./}
				started+=("$(((now - t0) / 1000))")
				ran=1
				break
			fi
		done
		kill "$WATCH_PID" 2>/dev/null || true
		wait "$WATCH_PID" 2>/dev/null || true
		if ((!ran)); then
			fail "bench-gu-$i did not run: $(k get pod "bench-gu-$i" -o 'jsonpath={.status.reason}: {.status.message}')"
			return
		fi
		if ((i == 0)); then
			local cpus env
			cpus="$(k exec "bench-gu-$i" -- sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2')" || true
			env="$(k exec "bench-gu-$i" -- sh -c 'echo $BENCH_DEVICES')" || true
			[[ "$cpus" == 1 && "$env" == dev-* ]] &&
				pass "the Guaranteed pod runs on CPU $cpus alone with device $env" ||
				fail "the Guaranteed pod's CPUs '$cpus', device env '$env' (wanted CPU 1 and a dev-*)"
		fi
		t0=${EPOCHREALTIME/./}
		k delete pod "bench-gu-$i" --wait=false >/dev/null
		poll "$TIMEOUT_S" gu_pods_gone || {
			fail "bench-gu-$i was not deleted"
			return
		}
		now=${EPOCHREALTIME/./}
		deleted+=("$(((now - t0) / 1000))")
	done
	stats "Guaranteed+device pod start" "${started[@]}"
	stats "Guaranteed+device pod delete" "${deleted[@]}"
}

# No CSI staging or publishing mount is left under the kubelet's root dir.
no_csi_mounts() {
	! awk -v d="$KDIR/root/" 'index($5, d) == 1 && ($5 ~ /kubernetes.io~csi/ ||
		index($5, d "plugins/kubernetes.io/csi/") == 1) { found = 1 } END { exit !found }' /proc/self/mountinfo
}

run_node_kubelet() {
	if [[ $KUBELET_KIND == upstream ]]; then
		krs_upstream_ensure upstream
	else
		[[ -x "$KUBELET_BIN" ]] || cl_die "no kubelet at $KUBELET_BIN (cargo build --release, or set KRS_OUR_KUBELET)"
	fi
	NODE_IP="$(cl_node_ip)"
	KDIR="$CL_STATE/smoke/$NODE"
	local root="$KDIR/root" cgroup="kubelet-rs-smoke-$INSTANCE"
	trap cleanup_kubelet EXIT
	mkdir -p "$root"
	privatize
	bash -c "source '$TESTBED/lib.sh' && krs_ensure_cgroup_root '$cgroup'"

	"$TESTBED/install.sh" >&2
	"$TESTBED/build-pause.sh" >/dev/null
	"$TESTBED/containerd.sh" start "$INSTANCE" >/dev/null
	CONTAINERD_UP=1
	"$TESTBED/images.sh" "$INSTANCE" >&2
	eval "$("$TESTBED/containerd.sh" env "$INSTANCE")"

	# Served on the node's own address so that the apiserver (which only knows InternalIP) can
	# reach it for logs and exec; only clients with a cluster-CA cert get in.
	local flags=(
		--bootstrap-kubeconfig="$CL_BOOTSTRAP_CONF"
		--kubeconfig="$root/kubelet.conf"
		--cert-dir="$root/pki"
		--rotate-certificates=true
		--container-runtime=remote
		--container-runtime-endpoint="$CONTAINER_RUNTIME_ENDPOINT"
		--root-dir="$root"
		--cgroup-root="/$cgroup"
		--cgroups-per-qos=true
		--cgroup-driver=cgroupfs
		--hostname-override="$NODE"
		--node-ip="$NODE_IP"
		--address="$NODE_IP"
		--port="$KUBELET_PORT"
		--healthz-port="$KUBELET_HEALTHZ_PORT"
		--read-only-port=0
		--anonymous-auth=false
		--client-ca-file="$CL_PKI/ca.crt"
		--authentication-token-webhook=true
		--authorization-mode=Webhook
		--cluster-domain="$KRS_CL_DNS_DOMAIN"
		--pod-infra-container-image="$KRS_SANDBOX_IMAGE"
		--make-iptables-util-chains=false
		--volume-plugin-dir="$root/volume-plugins"
		--fail-swap-on=false
		# The test bed's disk thresholds (tests/common, e2e/run.sh): this machine's disk is
		# often fuller than the default 10% free, which would put the node under disk pressure.
		--eviction-hard="memory.available<100Mi,nodefs.available<1%,imagefs.available<1%"
		--v=2
	)
	if ((BENCH_GUARANTEED > 0)); then
		[[ "$(nproc)" -ge 2 ]] || cl_die "--bench-guaranteed needs two CPUs (CPU 0 is reserved)"
		flags+=(--cpu-manager-policy=static --reserved-cpus=0)
	fi
	printf '[smoke] starting the %s kubelet as %s (log %s/kubelet.log)\n' "$KUBELET_KIND" "$NODE" "$KDIR" >&2
	"$KUBELET_BIN" "${flags[@]}" >"$KDIR/kubelet.log" 2>&1 &
	KUBELET_PID=$!

	if poll "$TIMEOUT_S" test -s "$root/pki/kubelet-client-current.pem"; then
		pass "$KUBELET_KIND kubelet got its client certificate by TLS bootstrap: $(openssl x509 -noout -subject \
			-nameopt compat -in "$root/pki/kubelet-client-current.pem")"
	else
		fail "$KUBELET_KIND kubelet did not finish TLS bootstrap"
	fi
	if poll "$TIMEOUT_S" node_ready; then
		pass "node $NODE Ready ($(k get node "$NODE" -o 'jsonpath={.status.nodeInfo.kubeletVersion}'), \
addresses $(k get node "$NODE" -o 'jsonpath={.status.addresses[*].address}'))"
	else
		fail "node $NODE not Ready; see $KDIR/kubelet.log"
		k get node "$NODE" -o wide >&2 || true
		return
	fi
	if poll "$TIMEOUT_S" pod_running; then
		pass "pod running: $(k get pods -l "app=$DEPLOYMENT" -o wide --no-headers)"
	else
		fail "deployment's pod not Running"
		k get pods -l "app=$DEPLOYMENT" -o wide >&2 || true
		return
	fi
	if poll 30 logs_say_hello; then
		pass "kubectl logs through the apiserver: $(k logs "deployment/$DEPLOYMENT" | head -n1)"
	else
		fail "kubectl logs: $(k logs "deployment/$DEPLOYMENT" 2>&1 | head -n3)"
	fi
	local out
	out="$(k exec "deployment/$DEPLOYMENT" -- cat /etc/hostname 2>&1)" || true
	if [[ "$out" == "$DEPLOYMENT"-* ]]; then
		pass "kubectl exec through the apiserver: $out"
	else
		fail "kubectl exec: $out"
	fi
	((BENCH_ROUNDS == 0)) || bench_api
	((BENCH_CSI == 0)) || bench_csi
	((BENCH_GUARANTEED == 0)) || bench_guaranteed
}

# --- main --------------------------------------------------------------------------------------

main() {
	local upstream=0 name=""
	KEEP=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--upstream-kubelet) upstream=1 ;;
		--our-kubelet)
			upstream=1
			KUBELET_KIND=ours
			KUBELET_BIN="${KRS_OUR_KUBELET:-${CARGO_TARGET_DIR:-/var/cache/kubelet-rs/target}/release/kubelet}"
			;;
		--bench)
			BENCH_ROUNDS="$2"
			shift
			;;
		--bench-csi)
			BENCH_CSI="$2"
			shift
			;;
		--bench-guaranteed)
			BENCH_GUARANTEED="$2"
			shift
			;;
		--keep) KEEP=1 ;;
		-h | --help)
			usage
			exit 0
			;;
		-*)
			usage
			exit 2
			;;
		*) name="$1" ;;
		esac
		shift
	done
	cl_require_root
	cl_vars "${name:-$KRS_CL_DEFAULT_NAME}"
	[[ "$NODE" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || cl_die "KRS_SMOKE_NODE '$NODE' is not a DNS label"

	if [[ "${KRS_SMOKE_IN_NS:-}" != 1 ]]; then
		"$HERE/up.sh" "$CL_NAME" >/dev/null
		check_ready
		check_pending_deployment
		check_bootstrap_csr
		check_node_kubeconfig
		if ((upstream)); then
			# The kubelet part needs private mounts; its exit status carries the verdict.
			local rc=0 benches=(--bench "$BENCH_ROUNDS" --bench-csi "$BENCH_CSI" --bench-guaranteed "$BENCH_GUARANTEED")
			local inner=(--upstream-kubelet "${benches[@]}")
			[[ $KUBELET_KIND != ours ]] || inner=(--our-kubelet "${benches[@]}")
			[[ $KEEP != 1 ]] || inner+=(--keep)
			KRS_SMOKE_IN_NS=1 unshare --mount --propagation private \
				bash "$SELF" "${inner[@]}" "$CL_NAME" || rc=$?
			((rc == 0)) || FAILED=1
		elif [[ $KEEP != 1 ]]; then
			k delete deployment "$DEPLOYMENT" --ignore-not-found >/dev/null 2>&1 || true
		fi
	else
		# shellcheck source=hack/testbed/lib.sh
		source "$KRS_CL_REPO_ROOT/hack/testbed/lib.sh"
		run_node_kubelet
	fi
	local what="all checks"
	[[ "${KRS_SMOKE_IN_NS:-}" != 1 ]] || what="kubelet checks"
	if ((FAILED)); then
		printf '[smoke] %s: some FAILED\n' "$what" >&2
		exit 1
	fi
	printf '[smoke] %s passed\n' "$what" >&2
}

main "$@"
