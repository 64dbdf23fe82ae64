# shellcheck shell=bash disable=SC2034
# Shared paths and helpers of hack/cluster/*.sh (a local control plane). Sourced, never run.
#
# One cluster is known by its NAME (default "krs"):
#   /var/lib/kubelet-rs/cluster/NAME/   state: pki/, etcd/ data, kubeconfigs, ports.env, token
#   /run/kubelet-rs/cluster/NAME/       runtime: <component>.pid, .log, .args
# Everything listens on 127.0.0.1 only.
#
# Note: hack/testbed/containerd.sh keeps an instance's runtime files in /run/kubelet-rs/INSTANCE
# and its purge deletes that folder, so do not name a containerd instance "cluster".

KRS_CL_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=hack/upstream/lib.sh
source "$KRS_CL_REPO_ROOT/hack/upstream/lib.sh"
KRS_CL_BIN_DIR="$KRS_UPSTREAM_BIN_DIR"
KRS_CL_DEFAULT_NAME="krs"
# Upstream's default service CIDR and its first address (the `kubernetes` Service). The same
# CIDR as hack/testbed/lib.sh, which blackholes it too.
KRS_CL_SERVICE_CIDR="10.96.0.0/12"
KRS_CL_SERVICE_IP="10.96.0.1"
KRS_CL_DNS_DOMAIN="cluster.local"
KRS_CL_BOOTSTRAP_GROUP="system:bootstrappers:kubeadm:default-node-token"
# Start order; down.sh walks it backwards.
KRS_CL_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)
# Leaf certificates are renewed when they would expire within this many seconds.
KRS_CL_RENEW_BEFORE_S=$((7 * 24 * 3600))

cl_log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
cl_die() {
	printf '[cluster %(%H:%M:%S)T] error: %s\n' -1 "$*" >&2
	exit 1
}

cl_require_root() {
	[[ "$(id -u)" -eq 0 ]] || cl_die "must run as root"
}

# cl_vars NAME: sets the CL_* variables describing one cluster.
cl_vars() {
	local name="$1"
	[[ "$name" =~ ^[a-z0-9][a-z0-9-]{0,19}$ ]] ||
		cl_die "cluster name '$name' must match [a-z0-9][a-z0-9-]{0,19}"
	CL_NAME="$name"
	CL_STATE="/var/lib/kubelet-rs/cluster/$name"
	CL_RUN="/run/kubelet-rs/cluster/$name"
	CL_PKI="$CL_STATE/pki"
	CL_ETCD_DATA="$CL_STATE/etcd"
	CL_PORTS_FILE="$CL_STATE/ports.env"
	CL_TOKEN_FILE="$CL_STATE/bootstrap-token"
	CL_ADMIN_CONF="$CL_STATE/admin.conf"
	CL_CM_CONF="$CL_STATE/controller-manager.conf"
	CL_SCHED_CONF="$CL_STATE/scheduler.conf"
	CL_BOOTSTRAP_CONF="$CL_STATE/bootstrap-kubelet.conf"
	CL_LOCK="$CL_STATE/.lock"
}

# The machine's own address: what the upstream kubelet accepts as --node-ip (it refuses
# loopback), and what the apiserver advertises.
cl_node_ip() {
	if [[ -n "${KRS_NODE_IP:-}" ]]; then
		printf '%s\n' "$KRS_NODE_IP"
		return
	fi
	local ip
	ip="$(hostname -I 2>/dev/null | awk '{ print $1 }')"
	[[ -n "$ip" ]] || cl_die "hostname -I gave no address; set KRS_NODE_IP"
	printf '%s\n' "$ip"
}

# cl_port_taken PORT: true if something listens on (or has bound) 127.0.0.1:PORT.
cl_port_taken() {
	local port="$1"
	if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
		return 0
	fi
	# ss may not see every socket (sandboxed kernels); a connect that succeeds is proof enough.
	timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
}

# cl_load_ports: sets CL_*_PORT from ports.env (written by up.sh on first start), overridden by
# the matching KRS_CLUSTER_*_PORT variables, else the defaults. Does not check availability.
cl_load_ports() {
	local APISERVER_PORT="" ETCD_PORT="" ETCD_PEER_PORT="" CM_PORT="" SCHEDULER_PORT=""
	if [[ -r "$CL_PORTS_FILE" ]]; then
		# Only our own KEY=NUMBER lines are taken, never arbitrary shell.
		local key value
		while IFS='=' read -r key value; do
			[[ "$value" =~ ^[0-9]+$ ]] || continue
			case "$key" in
			APISERVER_PORT | ETCD_PORT | ETCD_PEER_PORT | CM_PORT | SCHEDULER_PORT)
				printf -v "$key" '%s' "$value"
				;;
			esac
		done <"$CL_PORTS_FILE"
	fi
	CL_APISERVER_PORT="${KRS_CLUSTER_APISERVER_PORT:-${APISERVER_PORT:-6443}}"
	CL_ETCD_PORT="${KRS_CLUSTER_ETCD_PORT:-${ETCD_PORT:-12379}}"
	CL_ETCD_PEER_PORT="${KRS_CLUSTER_ETCD_PEER_PORT:-${ETCD_PEER_PORT:-12380}}"
	CL_CM_PORT="${KRS_CLUSTER_CM_PORT:-${CM_PORT:-10257}}"
	CL_SCHEDULER_PORT="${KRS_CLUSTER_SCHEDULER_PORT:-${SCHEDULER_PORT:-10259}}"
	local p
	for p in "$CL_APISERVER_PORT" "$CL_ETCD_PORT" "$CL_ETCD_PEER_PORT" "$CL_CM_PORT" "$CL_SCHEDULER_PORT"; do
		if ! [[ "$p" =~ ^[0-9]+$ ]] || ((p < 1 || p > 65535)); then
			cl_die "invalid port '$p'"
		fi
	done
	CL_APISERVER_URL="https://127.0.0.1:$CL_APISERVER_PORT"
}

cl_save_ports() {
	local tmp="$CL_PORTS_FILE.tmp"
	cat >"$tmp" <<EOF
APISERVER_PORT=$CL_APISERVER_PORT
ETCD_PORT=$CL_ETCD_PORT
ETCD_PEER_PORT=$CL_ETCD_PEER_PORT
CM_PORT=$CL_CM_PORT
SCHEDULER_PORT=$CL_SCHEDULER_PORT
EOF
	mv -f "$tmp" "$CL_PORTS_FILE"
}

# cl_running_pid COMPONENT: prints the pid of our running COMPONENT, fails if it does not run.
# A pid is ours only if its command line names the component's binary and our state folder, so
# a recycled pid (or another cluster's process) is never taken for ours.
cl_running_pid() {
	local component="$1" pidfile="$CL_RUN/$1.pid" pid cmdline
	[[ -r "$pidfile" ]] || return 1
	pid="$(<"$pidfile")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
	[[ "$cmdline" == *"$component "* && "$cmdline" == *"$CL_STATE/"* ]] || return 1
	# A zombie still has a cmdline on some kernels but serves nothing.
	[[ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)" != Z ]] || return 1
	printf '%s\n' "$pid"
}

# cl_stop COMPONENT: stops our COMPONENT if it runs: SIGTERM, then SIGKILL after a grace time.
# The Kubernetes components keep no state of their own (it is all in etcd), and kube-apiserver
# waits up to a minute for its watch connections to drain, so they get a short grace; etcd gets
# time to close its database.
cl_stop() {
	local component="$1" pid deadline grace=8
	[[ "$component" != etcd ]] || grace=30
	if ! pid="$(cl_running_pid "$component")"; then
		rm -f "$CL_RUN/$component.pid"
		return 0
	fi
	cl_log "stopping $component (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + grace))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
	if kill -0 "$pid" 2>/dev/null; then
		cl_log "$component still running after ${grace}s: killing it"
		kill -KILL "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 5))
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
	fi
	rm -f "$CL_RUN/$component.pid"
}

# cl_cert_fresh CRT: true if CRT exists and stays valid for a while.
cl_cert_fresh() {
	[[ -s "$1" ]] && openssl x509 -noout -checkend "$KRS_CL_RENEW_BEFORE_S" -in "$1" >/dev/null 2>&1
}

# cl_new_key OUT: an RSA key readable by root only.
cl_new_key() {
	(umask 077 && openssl genrsa -out "$1.tmp" 2048 2>/dev/null) || cl_die "openssl genrsa failed"
	mv -f "$1.tmp" "$1"
}

# cl_new_ca PREFIX CN: a self-signed CA, PREFIX.crt and PREFIX.key, valid 10 years.
cl_new_ca() {
	local prefix="$1" cn="$2"
	cl_new_key "$prefix.key"
	openssl req -x509 -new -key "$prefix.key" -subj "/CN=$cn" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" \
		-addext "subjectKeyIdentifier=hash" \
		-out "$prefix.crt.tmp" 2>/dev/null || cl_die "openssl: cannot make CA $prefix"
	mv -f "$prefix.crt.tmp" "$prefix.crt"
}

# cl_sign CA_PREFIX OUT_PREFIX SUBJECT EXT_KEY_USAGE [SAN]: a fresh key OUT_PREFIX.key and a
# certificate OUT_PREFIX.crt signed by CA_PREFIX, valid one year. SUBJECT is in openssl's
# /O=.../CN=... form; SAN is an openssl subjectAltName value or empty.
cl_sign() {
	local ca="$1" out="$2" subject="$3" eku="$4" san="${5:-}" ext
	ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
authorityKeyIdentifier=keyid"
	[[ -z "$san" ]] || ext+=$'\n'"subjectAltName=$san"
	cl_new_key "$out.key"
	openssl req -new -key "$out.key" -subj "$subject" -out "$out.csr" 2>/dev/null ||
		cl_die "openssl: cannot make a request for $out"
	openssl x509 -req -in "$out.csr" -CA "$ca.crt" -CAkey "$ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 \
		-extfile <(printf '%s\n' "$ext") -out "$out.crt.tmp" 2>/dev/null ||
		cl_die "openssl: cannot sign $out"
	rm -f "$out.csr"
	mv -f "$out.crt.tmp" "$out.crt"
}

# cl_b64 FILE: the file as one base64 line (kubeconfig *-data fields).
cl_b64() { base64 -w0 <"$1"; }

# cl_write_kubeconfig OUT USER CERT KEY: a kubeconfig for CL_APISERVER_URL with the cluster CA
# and a client certificate, everything embedded so the file can be copied anywhere.
cl_write_kubeconfig() {
	local out="$1" user="$2" cert="$3" key="$4"
	_cl_write_kubeconfig "$out" "$user" "    client-certificate-data: $(cl_b64 "$cert")
    client-key-data: $(cl_b64 "$key")"
}

# cl_write_token_kubeconfig OUT USER TOKEN: same, authenticating with a bearer token.
cl_write_token_kubeconfig() {
	_cl_write_kubeconfig "$1" "$2" "    token: $3"
}

_cl_write_kubeconfig() {
	local out="$1" user="$2" credentials="$3" tmp
	tmp="$(dirname "$out")/.$(basename "$out").tmp"
	(
		umask 077
		cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CL_NAME
  cluster:
    server: $CL_APISERVER_URL
    certificate-authority-data: $(cl_b64 "$CL_PKI/ca.crt")
users:
- name: $user
  user:
$credentials
contexts:
- name: $user@$CL_NAME
  context:
    cluster: $CL_NAME
    user: $user
current-context: $user@$CL_NAME
preferences: {}
EOF
	) || cl_die "cannot write $out"
	mv -f "$tmp" "$out"
}

cl_print_env() {
	local token=""
	[[ -r "$CL_TOKEN_FILE" ]] && token="$(<"$CL_TOKEN_FILE")"
	printf 'export KRS_CLUSTER_NAME=%q\n' "$CL_NAME"
	printf 'export KRS_CLUSTER_DIR=%q\n' "$CL_STATE"
	printf 'export KRS_CLUSTER_RUN_DIR=%q\n' "$CL_RUN"
	printf 'export KUBECONFIG=%q\n' "$CL_ADMIN_CONF"
	printf 'export KRS_APISERVER=%q\n' "$CL_APISERVER_URL"
	printf 'export KRS_CLUSTER_CA=%q\n' "$CL_PKI/ca.crt"
	printf 'export KRS_BOOTSTRAP_TOKEN=%q\n' "$token"
	printf 'export KRS_BOOTSTRAP_KUBECONFIG=%q\n' "$CL_BOOTSTRAP_CONF"
	printf 'export KRS_SERVICE_CIDR=%q\n' "$KRS_CL_SERVICE_CIDR"
	printf 'export KRS_CLUSTER_DNS_DOMAIN=%q\n' "$KRS_CL_DNS_DOMAIN"
	printf 'export KRS_NODE_IP=%q\n' "$(cl_node_ip)"
}
