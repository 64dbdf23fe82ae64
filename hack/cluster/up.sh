#!/usr/bin/env bash
# Usage: hack/cluster/up.sh [NAME]
#
# Starts a local Kubernetes control plane (upstream v1.20.2: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) for kubelets under test to join, then prints the
# same shell exports as hack/cluster/env.sh. NAME defaults to "krs". Idempotent: components
# that already run with the same arguments are left alone; missing ones are started, changed
# ones restarted. Stop with hack/cluster/down.sh NAME.
#
# Everything listens on 127.0.0.1 only. Ports are chosen on the first start (the default, or the
# next free one above it when taken) and kept in /var/lib/kubelet-rs/cluster/NAME/ports.env;
# these variables override them:
#   KRS_CLUSTER_APISERVER_PORT   (default 6443)    secure port of kube-apiserver
#   KRS_CLUSTER_ETCD_PORT        (default 12379)   etcd clients (TLS, its own CA)
#   KRS_CLUSTER_ETCD_PEER_PORT   (default 12380)   etcd peers (one member)
#   KRS_CLUSTER_CM_PORT          (default 10257)   kube-controller-manager's health/metrics
#   KRS_CLUSTER_SCHEDULER_PORT   (default 10259)   kube-scheduler's health/metrics
# Other knobs:
#   KRS_NODE_IP                  the address advertised by the apiserver and put in its serving
#                                certificate (default: first word of `hostname -I`)
#   KRS_CLUSTER_START_TIMEOUT    seconds to wait for each component to become healthy (120)
#   KRS_CLUSTER_VERBOSITY        klog -v of the components (2)
#   KRS_CLUSTER_APISERVER_EXTRA_FLAGS  more kube-apiserver flags, separated by blanks (e2e/run.sh
#                                passes --enable-aggregator-routing=true)
#
# Once the apiserver is ready, up.sh creates what kubeadm would for kubelet TLS bootstrap: a
# bootstrap token (group system:bootstrappers:kubeadm:default-node-token), the bindings that let
# that group create CSRs and get them auto-approved, the binding that auto-approves renewals by
# nodes, and kube-public/cluster-info. Kubeconfigs: admin.conf (system:masters) and
# bootstrap-kubelet.conf (the token); a node's own kubeconfig comes from
# hack/cluster/kubelet-kubeconfig.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=hack/cluster/lib.sh
source "$HERE/lib.sh"

START_TIMEOUT_S="${KRS_CLUSTER_START_TIMEOUT:-120}"
VERBOSITY="${KRS_CLUSTER_VERBOSITY:-2}"
KUBECTL_TIMEOUT=20s
CURL_TIMEOUT_S=5

usage() { echo "usage: $0 [NAME]" >&2; }

# --- prerequisites -------------------------------------------------------------------------

# Debian's etcd-server ships a service that would listen on the default ports 2379/2380. We only
# want the binary: the service is kept from starting while the package is installed, and
# disabled afterwards where systemd runs.
ensure_etcd() {
	command -v etcd >/dev/null && return 0
	local policy=/usr/sbin/policy-rc.d added_policy=0 rc=0
	if [[ ! -e "$policy" ]]; then
		printf '#!/bin/sh\n# Written by kubelet-rs hack/cluster/up.sh while installing etcd-server.\nexit 101\n' >"$policy"
		chmod 0755 "$policy"
		added_policy=1
	fi
	cl_log "installing etcd-server"
	if ! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends etcd-server >&2; then
		timeout 600 apt-get update -qq >&2 || true
		DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends etcd-server >&2 || rc=$?
	fi
	if ((added_policy)); then
		rm -f "$policy"
	fi
	((rc == 0)) || cl_die "apt-get install etcd-server failed"
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
		timeout 60 systemctl disable --now etcd.service >/dev/null 2>&1 || true
	fi
	command -v etcd >/dev/null || cl_die "etcd-server installed but no etcd binary on PATH"
}

# kube-apiserver, kube-controller-manager and kube-scheduler (hack/upstream/targets: cluster).
ensure_binaries() {
	krs_upstream_ensure cluster
}

# The testbed's network rule: Service IPs nobody rewrote go nowhere rather than out the default
# route. Same route as hack/testbed/containerd.sh installs; replacing it is idempotent.
apply_network_guard() {
	ip route replace blackhole "$KRS_CL_SERVICE_CIDR"
}

# --- ports ---------------------------------------------------------------------------------

# pick_port CURRENT ENV_OVERRIDE USED...: CURRENT if free or ours, else (when not forced by the
# environment) the next free port above it that is not in USED.
pick_port() {
	local port="$1" forced="$2" component="$3"
	shift 3
	local used=" $* " tries=0
	if cl_running_pid "$component" >/dev/null; then
		printf '%s\n' "$port"
		return
	fi
	while cl_port_taken "$port" || [[ "$used" == *" $port "* ]]; do
		[[ -z "$forced" ]] || cl_die "port $port (for $component) is taken; choose another"
		((tries++ < 200)) || cl_die "no free port found for $component"
		port=$((port + 1))
	done
	printf '%s\n' "$port"
}

choose_ports() {
	cl_load_ports
	CL_ETCD_PORT="$(pick_port "$CL_ETCD_PORT" "${KRS_CLUSTER_ETCD_PORT:-}" etcd)"
	# The peer port belongs to etcd as well: it is free when etcd is down.
	CL_ETCD_PEER_PORT="$(pick_port "$CL_ETCD_PEER_PORT" "${KRS_CLUSTER_ETCD_PEER_PORT:-}" etcd "$CL_ETCD_PORT")"
	CL_APISERVER_PORT="$(pick_port "$CL_APISERVER_PORT" "${KRS_CLUSTER_APISERVER_PORT:-}" kube-apiserver \
		"$CL_ETCD_PORT" "$CL_ETCD_PEER_PORT")"
	CL_CM_PORT="$(pick_port "$CL_CM_PORT" "${KRS_CLUSTER_CM_PORT:-}" kube-controller-manager \
		"$CL_ETCD_PORT" "$CL_ETCD_PEER_PORT" "$CL_APISERVER_PORT")"
	CL_SCHEDULER_PORT="$(pick_port "$CL_SCHEDULER_PORT" "${KRS_CLUSTER_SCHEDULER_PORT:-}" kube-scheduler \
		"$CL_ETCD_PORT" "$CL_ETCD_PEER_PORT" "$CL_APISERVER_PORT" "$CL_CM_PORT")"
	CL_APISERVER_URL="https://127.0.0.1:$CL_APISERVER_PORT"
	cl_save_ports
}

# --- certificates and kubeconfigs ------------------------------------------------------------

apiserver_sans() {
	local sans="IP:127.0.0.1,DNS:localhost,IP:$KRS_CL_SERVICE_IP,IP:$NODE_IP"
	sans+=",DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	sans+=",DNS:kubernetes.default.svc.$KRS_CL_DNS_DOMAIN"
	printf '%s\n' "$sans"
}

# leaf NAME SIGNER SUBJECT EKU [SAN]: (re)issues pki/NAME.{crt,key} when missing, expiring,
# issued by another CA (after a CA was recreated) or made for other SANs.
leaf() {
	local name="$1" signer="$2" subject="$3" eku="$4" san="${5:-}" out="$CL_PKI/$1"
	if cl_cert_fresh "$out.crt" && [[ -s "$out.key" ]] &&
		openssl verify -CAfile "$CL_PKI/$signer.crt" "$out.crt" >/dev/null 2>&1 &&
		[[ "$(cat "$out.san" 2>/dev/null)" == "$san" ]]; then
		return 0
	fi
	cl_log "issuing pki/$name.crt ($subject)"
	cl_sign "$CL_PKI/$signer" "$out" "$subject" "$eku" "$san"
	printf '%s\n' "$san" >"$out.san"
}

ensure_pki() {
	mkdir -p "$CL_PKI"
	chmod 0700 "$CL_PKI"
	local ca
	for ca in ca etcd-ca front-proxy-ca; do
		if [[ ! -s "$CL_PKI/$ca.crt" || ! -s "$CL_PKI/$ca.key" ]]; then
			cl_log "creating pki/$ca.crt"
			cl_new_ca "$CL_PKI/$ca" "kubelet-rs-$CL_NAME-$ca"
		fi
	done
	if [[ ! -s "$CL_PKI/sa.key" || ! -s "$CL_PKI/sa.pub" ]]; then
		cl_log "creating the service-account key pair"
		cl_new_key "$CL_PKI/sa.key"
		openssl rsa -in "$CL_PKI/sa.key" -pubout -out "$CL_PKI/sa.pub" 2>/dev/null ||
			cl_die "openssl: cannot derive sa.pub"
	fi
	leaf etcd-server etcd-ca "/CN=kubelet-rs-etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
	leaf apiserver-etcd-client etcd-ca "/CN=kube-apiserver-etcd-client" clientAuth
	leaf apiserver ca "/CN=kube-apiserver" serverAuth "$(apiserver_sans)"
	leaf apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	leaf admin ca "/O=system:masters/CN=kubernetes-admin" clientAuth
	leaf controller-manager ca "/CN=system:kube-controller-manager" clientAuth
	leaf scheduler ca "/CN=system:kube-scheduler" clientAuth
	leaf front-proxy-client front-proxy-ca "/CN=front-proxy-client" clientAuth
}

ensure_token() {
	if [[ ! -s "$CL_TOKEN_FILE" ]]; then
		# Token ids are [a-z0-9]{6} and secrets [a-z0-9]{16}; hex digits are a subset.
		(umask 077 && printf '%s.%s\n' "$(openssl rand -hex 3)" "$(openssl rand -hex 8)" >"$CL_TOKEN_FILE")
	fi
	TOKEN="$(<"$CL_TOKEN_FILE")"
	[[ "$TOKEN" =~ ^([a-z0-9]{6})\.([a-z0-9]{16})$ ]] || cl_die "malformed token in $CL_TOKEN_FILE"
	TOKEN_ID="${BASH_REMATCH[1]}"
	TOKEN_SECRET="${BASH_REMATCH[2]}"
}

# Rewritten on every start: cheap, and they follow a changed port.
write_kubeconfigs() {
	cl_write_kubeconfig "$CL_ADMIN_CONF" kubernetes-admin "$CL_PKI/admin.crt" "$CL_PKI/admin.key"
	cl_write_kubeconfig "$CL_CM_CONF" system:kube-controller-manager \
		"$CL_PKI/controller-manager.crt" "$CL_PKI/controller-manager.key"
	cl_write_kubeconfig "$CL_SCHED_CONF" system:kube-scheduler "$CL_PKI/scheduler.crt" "$CL_PKI/scheduler.key"
	cl_write_token_kubeconfig "$CL_BOOTSTRAP_CONF" kubelet-bootstrap "$TOKEN"
}

# --- component command lines -------------------------------------------------------------------

# args_COMPONENT: sets BIN and ARGS.
args_etcd() {
	BIN="$(command -v etcd)"
	ARGS=(
		--name="$CL_NAME"
		--data-dir="$CL_ETCD_DATA"
		--listen-client-urls="https://127.0.0.1:$CL_ETCD_PORT"
		--advertise-client-urls="https://127.0.0.1:$CL_ETCD_PORT"
		--listen-peer-urls="http://127.0.0.1:$CL_ETCD_PEER_PORT"
		--initial-advertise-peer-urls="http://127.0.0.1:$CL_ETCD_PEER_PORT"
		--initial-cluster="$CL_NAME=http://127.0.0.1:$CL_ETCD_PEER_PORT"
		--initial-cluster-state=new
		--initial-cluster-token="kubelet-rs-$CL_NAME"
		--cert-file="$CL_PKI/etcd-server.crt"
		--key-file="$CL_PKI/etcd-server.key"
		--trusted-ca-file="$CL_PKI/etcd-ca.crt"
		--client-cert-auth=true
		--snapshot-count=10000
		--logger=zap
	)
}

args_kube_apiserver() {
	BIN="$(krs_upstream_bin kube-apiserver)"
	# shellcheck disable=SC2054 # commas inside flag values
	ARGS=(
		--bind-address=127.0.0.1
		--advertise-address="$ADVERTISE_ADDRESS"
		--secure-port="$CL_APISERVER_PORT"
		--insecure-port=0
		--etcd-servers="https://127.0.0.1:$CL_ETCD_PORT"
		--etcd-cafile="$CL_PKI/etcd-ca.crt"
		--etcd-certfile="$CL_PKI/apiserver-etcd-client.crt"
		--etcd-keyfile="$CL_PKI/apiserver-etcd-client.key"
		--tls-cert-file="$CL_PKI/apiserver.crt"
		--tls-private-key-file="$CL_PKI/apiserver.key"
		--client-ca-file="$CL_PKI/ca.crt"
		--kubelet-client-certificate="$CL_PKI/apiserver-kubelet-client.crt"
		--kubelet-client-key="$CL_PKI/apiserver-kubelet-client.key"
		--kubelet-preferred-address-types=InternalIP
		--authorization-mode=Node,RBAC
		--enable-admission-plugins=NodeRestriction
		--enable-bootstrap-token-auth=true
		--allow-privileged=true
		# pods/ephemeralcontainers (kubectl debug), generic ephemeral volumes and the CSIDriver
		# fields requiresRepublish and tokenRequests (dropped without the gate) are alpha in
		# v1.20.
		--feature-gates=EphemeralContainers=true,GenericEphemeralVolume=true,CSIServiceAccountToken=true
		--service-cluster-ip-range="$KRS_CL_SERVICE_CIDR"
		--service-account-issuer="https://kubernetes.default.svc.$KRS_CL_DNS_DOMAIN"
		--service-account-key-file="$CL_PKI/sa.pub"
		--service-account-signing-key-file="$CL_PKI/sa.key"
		--requestheader-client-ca-file="$CL_PKI/front-proxy-ca.crt"
		--requestheader-allowed-names=front-proxy-client
		--requestheader-extra-headers-prefix=X-Remote-Extra-
		--requestheader-group-headers=X-Remote-Group
		--requestheader-username-headers=X-Remote-User
		--proxy-client-cert-file="$CL_PKI/front-proxy-client.crt"
		--proxy-client-key-file="$CL_PKI/front-proxy-client.key"
		--profiling=false
		--v="$VERBOSITY"
	)
	local extra=()
	read -r -a extra <<<"${KRS_CLUSTER_APISERVER_EXTRA_FLAGS:-}"
	ARGS+=("${extra[@]}")
}

# What kube-controller-manager and kube-scheduler share: one kubeconfig for everything, a
# secure port on loopback only, no insecure port, no leader election, no profiling.
# component_args KUBECONFIG PORT CERT_DIR
component_args() {
	ARGS=(
		--kubeconfig="$1"
		--authentication-kubeconfig="$1"
		--authorization-kubeconfig="$1"
		--bind-address=127.0.0.1
		--secure-port="$2"
		--port=0
		--cert-dir="$3"
		--leader-elect=false
		--profiling=false
		--v="$VERBOSITY"
	)
}

args_kube_controller_manager() {
	BIN="$(krs_upstream_bin kube-controller-manager)"
	component_args "$CL_CM_CONF" "$CL_CM_PORT" "$CL_STATE/controller-manager-serving"
	ARGS+=(
		--client-ca-file="$CL_PKI/ca.crt"
		--requestheader-client-ca-file="$CL_PKI/front-proxy-ca.crt"
		--controllers='*,bootstrapsigner,tokencleaner'
		--cluster-name="$CL_NAME"
		--cluster-signing-cert-file="$CL_PKI/ca.crt"
		--cluster-signing-key-file="$CL_PKI/ca.key"
		--root-ca-file="$CL_PKI/ca.crt"
		--service-account-private-key-file="$CL_PKI/sa.key"
		--service-cluster-ip-range="$KRS_CL_SERVICE_CIDR"
		--use-service-account-credentials=true
		# The ephemeral volume controller makes the claims of generic ephemeral volumes.
		--feature-gates=GenericEphemeralVolume=true
	)
}

args_kube_scheduler() {
	BIN="$(krs_upstream_bin kube-scheduler)"
	component_args "$CL_SCHED_CONF" "$CL_SCHEDULER_PORT" "$CL_STATE/scheduler-serving"
	# A pod with a generic ephemeral volume waits for its claim before it is scheduled.
	ARGS+=(--feature-gates=GenericEphemeralVolume=true)
}

# --- processes ---------------------------------------------------------------------------------

# ensure_component NAME: starts NAME unless it already runs with the same command line; returns
# 0 if it (re)started it, 1 if it was left running.
ensure_component() {
	local component="$1" pid argsfile="$CL_RUN/$1.args" log="$CL_RUN/$1.log" wanted
	"args_${component//-/_}"
	wanted="$(printf '%s\n' "$BIN" "${ARGS[@]}")"
	# The controller-manager and the scheduler find the apiserver through their kubeconfig, which
	# names its port: when the port moved (it was taken while the apiserver was down), they must
	# restart too, or they keep calling the old one.
	case "$component" in kube-controller-manager | kube-scheduler)
		wanted+=$'\n'"# apiserver $CL_APISERVER_URL"
		;;
	esac
	if pid="$(cl_running_pid "$component")"; then
		if [[ "$wanted" == "$(cat "$argsfile" 2>/dev/null)" ]]; then
			cl_log "$component already running (pid $pid)"
			return 1
		fi
		cl_log "$component runs with other arguments: restarting it"
		cl_stop "$component"
	fi
	[[ -x "$BIN" ]] || cl_die "$BIN missing"
	# /run is memory: keep the previous log only.
	if [[ -f "$log" ]]; then
		mv -f "$log" "$log.1"
	fi
	cl_log "starting $component (log $log)"
	# setsid: a Ctrl-C aimed at the caller must not take the control plane down with it.
	# 9>&-: the daemon must not inherit (and so hold forever) our lock.
	setsid "$BIN" "${ARGS[@]}" </dev/null >"$log" 2>&1 9>&- &
	pid=$!
	echo "$pid" >"$CL_RUN/$component.pid"
	printf '%s\n' "$wanted" >"$argsfile"
	# Until its exec lands the fork shows this script's command line, which under load took
	# longer than the wait below ("exited at once" for a process that ran, in an empty-cache CI
	# run): up to 5 s for it, then the component must still run a moment later.
	local waited=0
	while [[ -e "/proc/$pid" ]] && ! cl_running_pid "$component" >/dev/null && ((waited < 50)); do
		sleep 0.1
		waited=$((waited + 1))
	done
	sleep 0.3
	if ! cl_running_pid "$component" >/dev/null; then
		tail -n 30 "$log" >&2 || true
		cl_die "$component exited at once; log: $log"
	fi
	return 0
}

# wait_until COMPONENT WHAT CMD...: polls CMD until it succeeds, the component dies or time runs out.
wait_until() {
	local component="$1" what="$2" deadline=$((SECONDS + START_TIMEOUT_S))
	shift 2
	while ((SECONDS < deadline)); do
		if ! cl_running_pid "$component" >/dev/null; then
			tail -n 30 "$CL_RUN/$component.log" >&2 || true
			cl_die "$component exited; log: $CL_RUN/$component.log"
		fi
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.5
	done
	tail -n 30 "$CL_RUN/$component.log" >&2 || true
	cl_die "$component: $what not reached within ${START_TIMEOUT_S}s; log: $CL_RUN/$component.log"
}

etcd_healthy() {
	curl -fsS --max-time "$CURL_TIMEOUT_S" --cacert "$CL_PKI/etcd-ca.crt" \
		--cert "$CL_PKI/apiserver-etcd-client.crt" --key "$CL_PKI/apiserver-etcd-client.key" \
		"https://127.0.0.1:$CL_ETCD_PORT/health" | grep -q '"health":"true"'
}

apiserver_ready() {
	[[ "$(curl -fsS --max-time "$CURL_TIMEOUT_S" --cacert "$CL_PKI/ca.crt" \
		--cert "$CL_PKI/admin.crt" --key "$CL_PKI/admin.key" "$CL_APISERVER_URL/readyz")" == ok ]]
}

# The controller-manager and the scheduler serve /healthz to anyone, with a self-signed cert.
healthz_ok() {
	[[ "$(curl -fsSk --max-time "$CURL_TIMEOUT_S" "https://127.0.0.1:$1/healthz")" == ok ]]
}

kubectl_admin() {
	kubectl --kubeconfig "$CL_ADMIN_CONF" --request-timeout="$KUBECTL_TIMEOUT" "$@"
}

# --- cluster objects ---------------------------------------------------------------------------

bootstrap_objects() {
	local cluster_info
	# The CA and address a joining node may discover anonymously (kubeadm's cluster-info); the
	# bootstrapsigner controller adds the token's signature to it.
	cluster_info="$(
		cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ""
  cluster:
    server: $CL_APISERVER_URL
    certificate-authority-data: $(cl_b64 "$CL_PKI/ca.crt")
contexts: []
users: []
preferences: {}
EOF
	)"
	# Indented to sit inside the ConfigMap's literal block below.
	local nl=$'\n'
	cluster_info="    ${cluster_info//$nl/$nl    }"
	cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$TOKEN_ID
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: "kubelet-rs test cluster $CL_NAME"
  token-id: "$TOKEN_ID"
  token-secret: "$TOKEN_SECRET"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "$KRS_CL_BOOTSTRAP_GROUP"
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $KRS_CL_BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: $KRS_CL_BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cluster-info
  namespace: kube-public
data:
  kubeconfig: |
$cluster_info
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
rules:
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [cluster-info]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kubeadm:bootstrap-signer-clusterinfo
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:anonymous
EOF
}

apply_bootstrap_objects() {
	local deadline=$((SECONDS + START_TIMEOUT_S)) out
	# kube-public exists only once the apiserver's bootstrap controller has run.
	while ! out="$(bootstrap_objects | kubectl_admin apply -f - 2>&1)"; do
		((SECONDS < deadline)) || cl_die "cannot create the bootstrap objects: $out"
		sleep 1
	done
}

default_sa_has_token() {
	[[ -n "$(kubectl_admin -n default get serviceaccount default -o 'jsonpath={.secrets[0].name}')" ]]
}

# --- main --------------------------------------------------------------------------------------

main() {
	if [[ $# -gt 1 ]]; then
		usage
		exit 2
	fi
	case "${1:-}" in -h | --help | help)
		usage
		exit 0
		;;
	esac
	cl_require_root
	cl_vars "${1:-$KRS_CL_DEFAULT_NAME}"
	command -v kubectl >/dev/null || cl_die "kubectl missing"
	command -v openssl >/dev/null || cl_die "openssl missing"
	command -v curl >/dev/null || cl_die "curl missing"

	mkdir -p "$CL_STATE" "$CL_RUN"
	chmod 0700 "$CL_STATE"
	# Two up.sh (or up.sh and down.sh) at once would race on pid files and certificates.
	exec 9>"$CL_LOCK"
	flock -w 900 9 || cl_die "another up.sh/down.sh holds $CL_LOCK"

	apply_network_guard
	ensure_etcd
	ensure_binaries

	NODE_IP="$(cl_node_ip)"
	# The apiserver writes its address into the `kubernetes` Endpoints, whose validation refuses
	# loopback addresses; the machine's own address is local and accepted.
	ADVERTISE_ADDRESS="${KRS_CLUSTER_ADVERTISE_ADDRESS:-$NODE_IP}"
	choose_ports
	ensure_pki
	ensure_token
	write_kubeconfigs

	local restarted=0
	if ensure_component etcd; then restarted=1; fi
	wait_until etcd "health" etcd_healthy
	if ensure_component kube-apiserver; then restarted=1; fi
	wait_until kube-apiserver "/readyz" apiserver_ready
	if ensure_component kube-controller-manager; then restarted=1; fi
	if ensure_component kube-scheduler; then restarted=1; fi
	wait_until kube-controller-manager "/healthz" healthz_ok "$CL_CM_PORT"
	wait_until kube-scheduler "/healthz" healthz_ok "$CL_SCHEDULER_PORT"
	if ((restarted)) || ! kubectl_admin -n kube-system get secret "bootstrap-token-$TOKEN_ID" >/dev/null 2>&1; then
		apply_bootstrap_objects
	fi
	# Pods are refused until their namespace's default ServiceAccount has a token.
	wait_until kube-controller-manager "a token for default/default" default_sa_has_token
	cl_log "cluster $CL_NAME ready at $CL_APISERVER_URL"
	cl_print_env
}

main "$@"
