#!/bin/sh
# Usage: installer.sh {run|install|uninstall|wait-uninstalled}
#
# Swaps the kubelet of one node for kubelet-rs, the way the kubelet-rs Helm chart does it: the
# DaemonSet's pod runs `run`, the chart's pre-delete hook Job runs `wait-uninstalled`.
#
#   run               install on this node (below), then stay: poll the chart's ConfigMap and,
#                     once its `uninstall` flag is "true", undo the install; never exits by itself
#   install           install on this node once and exit (0 installed, 1 rolled back or failed)
#   uninstall         undo the install on this node once and exit
#   wait-uninstalled  (hook Job) set the ConfigMap's `uninstall` flag, then wait until no Node
#                     carries the label $STATE_LABEL (every pod has undone its node)
#
# Installing, one node at a time across the cluster (a coordination.k8s.io Lease is the lock;
# a holder that stops renewing it loses it after LEASE_DURATION_S):
#   1. copy KUBELET_SRC to $HOST_ROOT$BIN_DIR/kubelet (the node's own kubelet is not touched);
#   2. write the systemd drop-in $HOST_ROOT$DROPIN that resets kubelet.service's ExecStart to our
#      binary with kubeadm's variables ($KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS
#      $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS) and EXTRA_FLAGS; with TRACING_ENDPOINT, a
#      KubeletConfiguration drop-in with a `tracing` block in $HOST_ROOT$CONFIG_DIR too;
#   3. `$SYSTEMCTL daemon-reload`, `$SYSTEMCTL restart kubelet`;
#   4. wait up to ROLLBACK_DEADLINE_S for HEALTHZ_URL to answer "ok" and for the Node's Ready
#      condition to be True with a heartbeat from after the restart and our kubelet's version;
#   5. on success label the Node $STATE_LABEL=installed, else roll back (drop-in, tracing
#      config and binary removed, daemon-reload, the old kubelet restarted) and label it
#      $STATE_LABEL=rolled-back; annotations say what happened. A node rolled back from a
#      binary is not tried again with the same binary (remove the label to retry).
#
# Everything it touches is a parameter, so the same script runs in the pod and in the chart's
# tests (charts/kubelet-rs/test/run.sh):
#   HOST_ROOT        the host's / as this process sees it            (/host)
#   SYSTEMCTL        the systemctl command line, split on blanks      (nsenter into PID 1's
#                    namespaces, then systemctl)
#   SYSTEMCTL_TIMEOUT_S  the bound on each systemctl call              (150)
#   NODE_NAME        this node (required; the Downward API's spec.nodeName)
#   HOLDER           lock holder identity (the pod's name)            ($NODE_NAME)
#   API_URL          the apiserver                                     (https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)
#   API_TOKEN_FILE   bearer token, read at every request               (the service account's)
#   API_CA_FILE      CA bundle for API_URL; empty: none (http)         (the service account's)
#   NAMESPACE, LEASE_NAME, CONFIGMAP_NAME   the lock and the uninstall flag (chart's names)
#   KUBELET_SRC      our kubelet binary in the image                   (/opt/kubelet-rs/kubelet)
#   BIN_DIR, DROPIN, CONFIG_DIR  host paths (see the defaults below)
#   EXTRA_FLAGS      extra kubelet flags, blank-separated (no quoting: none may hold a blank)
#   TRACING_ENDPOINT, TRACING_SAMPLING_RATE   the kubelet's tracing block (none when empty)
#   HEALTHZ_URL      the kubelet's healthz                            (http://127.0.0.1:10248/healthz)
#   ROLLBACK_DEADLINE_S, LEASE_DURATION_S, POLL_S, WAIT_TIMEOUT_S (wait-uninstalled)
#   READY_FILE       created when this node runs our kubelet (the pod's readiness probe)
set -eu

HOST_ROOT="${HOST_ROOT:-/host}"
SYSTEMCTL="${SYSTEMCTL:-nsenter -t 1 -m -u -i -n -p -- systemctl}"
SYSTEMCTL_TIMEOUT_S="${SYSTEMCTL_TIMEOUT_S:-150}"
NODE_NAME="${NODE_NAME:-}"
HOLDER="${HOLDER:-$NODE_NAME}"
SA_DIR=/var/run/secrets/kubernetes.io/serviceaccount
API_URL="${API_URL:-https://${KUBERNETES_SERVICE_HOST:-kubernetes.default.svc}:${KUBERNETES_SERVICE_PORT:-443}}"
API_TOKEN_FILE="${API_TOKEN_FILE-$SA_DIR/token}"
API_CA_FILE="${API_CA_FILE-$SA_DIR/ca.crt}"
NAMESPACE="${NAMESPACE:-$(cat "$SA_DIR/namespace" 2>/dev/null || echo default)}"
LEASE_NAME="${LEASE_NAME:-kubelet-rs-install-lock}"
CONFIGMAP_NAME="${CONFIGMAP_NAME:-kubelet-rs-control}"
KUBELET_SRC="${KUBELET_SRC:-/opt/kubelet-rs/kubelet}"
BIN_DIR="${BIN_DIR:-/opt/kubelet-rs/bin}"
DROPIN="${DROPIN:-/etc/systemd/system/kubelet.service.d/90-kubelet-rs.conf}"
CONFIG_DIR="${CONFIG_DIR:-/etc/kubernetes/kubelet-rs.conf.d}"
EXTRA_FLAGS="${EXTRA_FLAGS:-}"
TRACING_ENDPOINT="${TRACING_ENDPOINT:-}"
TRACING_SAMPLING_RATE="${TRACING_SAMPLING_RATE:-}"
HEALTHZ_URL="${HEALTHZ_URL:-http://127.0.0.1:10248/healthz}"
ROLLBACK_DEADLINE_S="${ROLLBACK_DEADLINE_S:-180}"
LEASE_DURATION_S="${LEASE_DURATION_S:-60}"
POLL_S="${POLL_S:-10}"
WAIT_TIMEOUT_S="${WAIT_TIMEOUT_S:-1800}"
READY_FILE="${READY_FILE:-/tmp/kubelet-rs-ready}"
STATE_LABEL=kubelet-rs.io/state
ANN_PREFIX=kubelet-rs.io

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
API_CODE=""
LOCK_RENEWED_AT=0

log() { printf '[installer %s %s] %s\n' "$(date -u +%H:%M:%S)" "${NODE_NAME:-?}" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}
now_s() { date -u +%s; }
micro_now() { date -u +%Y-%m-%dT%H:%M:%S.000000Z; }

# api METHOD PATH [BODY [CONTENT-TYPE]]: the response body in API_BODY, the HTTP status in
# API_CODE ("000" when the apiserver could not be reached). Never call it in $(...): the
# variables would stay in the subshell.
api() {
	method="$1" path="$2" body="${3:-}" ctype="${4:-application/json}"
	set -- -sS -o "$TMP/resp" -w '%{http_code}' --max-time 15 -X "$method" \
		-H 'Accept: application/json'
	if [ -n "$API_TOKEN_FILE" ] && [ -r "$API_TOKEN_FILE" ]; then
		# A header file keeps the token out of the process list.
		printf 'Authorization: Bearer %s\n' "$(cat "$API_TOKEN_FILE")" >"$TMP/auth"
		set -- "$@" -H "@$TMP/auth"
	fi
	if [ -n "$API_CA_FILE" ]; then set -- "$@" --cacert "$API_CA_FILE"; fi
	if [ -n "$body" ]; then
		printf '%s' "$body" >"$TMP/req"
		set -- "$@" -H "Content-Type: $ctype" --data-binary "@$TMP/req"
	fi
	API_CODE="$(curl "$@" "$API_URL$path" 2>"$TMP/curl.err")" || API_CODE=000
	[ "$API_CODE" != 000 ] || log "apiserver unreachable: $(cat "$TMP/curl.err")"
	API_BODY="$(cat "$TMP/resp" 2>/dev/null || true)"
	rm -f "$TMP/resp" "$TMP/auth"
}

# ---- the lock: a Lease, taken with the apiserver's optimistic concurrency (resourceVersion) ----

LEASE_PATH() { echo "/apis/coordination.k8s.io/v1/namespaces/$NAMESPACE/leases/$LEASE_NAME"; }

# Succeeds when the lease in $1 has no holder, is ours, or was not renewed within its duration.
lease_free() {
	printf '%s' "$1" | jq -e --arg me "$HOLDER" --argjson now "$(now_s)" '
		(.spec.holderIdentity // "") as $h
		| ($h == "" or $h == $me
		   or ((.spec.renewTime // "1970-01-01T00:00:00Z") | sub("\\.[0-9]+"; "") | fromdateiso8601)
		      + (.spec.leaseDurationSeconds // 0) < $now)' >/dev/null
}

lock_acquire() {
	waiting_for=""
	while :; do
		api GET "$(LEASE_PATH)"
		lease="$API_BODY"
		t="$(micro_now)"
		case "$API_CODE" in
		404)
			new="$(jq -n --arg n "$LEASE_NAME" --arg ns "$NAMESPACE" --arg h "$HOLDER" \
				--argjson d "$LEASE_DURATION_S" --arg t "$t" '{apiVersion: "coordination.k8s.io/v1",
				kind: "Lease", metadata: {name: $n, namespace: $ns}, spec: {holderIdentity: $h,
				leaseDurationSeconds: $d, acquireTime: $t, renewTime: $t, leaseTransitions: 0}}')"
			api POST "/apis/coordination.k8s.io/v1/namespaces/$NAMESPACE/leases" "$new" >/dev/null
			[ "$API_CODE" != 201 ] || break
			;;
		200)
			if lease_free "$lease"; then
				prev="$(printf '%s' "$lease" | jq -r '.spec.holderIdentity // ""')"
				upd="$(printf '%s' "$lease" | jq --arg h "$HOLDER" --argjson d "$LEASE_DURATION_S" \
					--arg t "$t" '.spec.holderIdentity = $h | .spec.leaseDurationSeconds = $d
					| .spec.acquireTime = $t | .spec.renewTime = $t
					| .spec.leaseTransitions = ((.spec.leaseTransitions // 0) + 1)')"
				api PUT "$(LEASE_PATH)" "$upd" >/dev/null
				if [ "$API_CODE" = 200 ]; then
					[ -z "$prev" ] || [ "$prev" = "$HOLDER" ] ||
						log "took over the lock from $prev (not renewed for ${LEASE_DURATION_S}s)"
					break
				fi
			else
				holder="$(printf '%s' "$lease" | jq -r '.spec.holderIdentity')"
				if [ "$holder" != "$waiting_for" ]; then
					log "waiting for the lock (lease $NAMESPACE/$LEASE_NAME, held by $holder)"
					waiting_for="$holder"
				fi
			fi
			;;
		*) log "lease $NAMESPACE/$LEASE_NAME: HTTP $API_CODE" ;;
		esac
		sleep "${LOCK_RETRY_S:-2}"
	done
	LOCK_RENEWED_AT="$(now_s)"
	log "holding the lock (lease $NAMESPACE/$LEASE_NAME as $HOLDER)"
}

# Renews the lease when a third of its duration has passed since the last renewal.
lock_renew() {
	[ $(($(now_s) - LOCK_RENEWED_AT)) -ge $((LEASE_DURATION_S / 3)) ] || return 0
	api GET "$(LEASE_PATH)"
	lease="$API_BODY"
	[ "$API_CODE" = 200 ] || {
		log "warning: cannot read the lease to renew it (HTTP $API_CODE)"
		return 0
	}
	holder="$(printf '%s' "$lease" | jq -r '.spec.holderIdentity // ""')"
	if [ "$holder" != "$HOLDER" ]; then
		log "warning: the lock is now held by '$holder'; finishing this node anyway"
		return 0
	fi
	upd="$(printf '%s' "$lease" | jq --arg t "$(micro_now)" '.spec.renewTime = $t')"
	api PUT "$(LEASE_PATH)" "$upd" >/dev/null
	if [ "$API_CODE" = 200 ]; then
		LOCK_RENEWED_AT="$(now_s)"
	else
		log "warning: lease renewal: HTTP $API_CODE"
	fi
}

lock_release() {
	i=0
	while [ $i -lt 5 ]; do
		i=$((i + 1))
		api GET "$(LEASE_PATH)"
		lease="$API_BODY"
		[ "$API_CODE" = 200 ] || continue
		[ "$(printf '%s' "$lease" | jq -r '.spec.holderIdentity // ""')" = "$HOLDER" ] || return 0
		upd="$(printf '%s' "$lease" | jq '.spec.holderIdentity = "" | del(.spec.acquireTime, .spec.renewTime)')"
		api PUT "$(LEASE_PATH)" "$upd" >/dev/null
		if [ "$API_CODE" = 200 ]; then
			log "released the lock"
			return 0
		fi
		sleep 1
	done
	log "warning: could not release the lock; it expires ${LEASE_DURATION_S}s after its last renewal"
}

# ---- the Node ----

# Sets NODE (empty when the Node could not be read).
node_get() {
	api GET "/api/v1/nodes/$NODE_NAME"
	NODE=""
	[ "$API_CODE" != 200 ] || NODE="$API_BODY"
}

# node_mark STATE MESSAGE: label (null removes) and annotations.
node_mark() {
	state="$1" message="$2"
	patch="$(jq -n --arg l "$STATE_LABEL" --arg s "$state" --arg p "$ANN_PREFIX" --arg m "$message" \
		--arg v "${OUR_VERSION:-}" --arg sha "${OUR_SHA:-}" '
		if $s == "" then {metadata: {labels: {($l): null}, annotations: {($p + "/message"): null,
			($p + "/version"): null, ($p + "/sha256"): null}}}
		else {metadata: {labels: {($l): $s}, annotations: {($p + "/message"): $m,
			($p + "/version"): $v, ($p + "/sha256"): $sha}}} end')"
	i=0
	while [ $i -lt 10 ]; do
		i=$((i + 1))
		api PATCH "/api/v1/nodes/$NODE_NAME" "$patch" application/merge-patch+json >/dev/null
		[ "$API_CODE" != 200 ] || return 0
		log "marking node $NODE_NAME: HTTP $API_CODE"
		sleep 2
	done
	die "could not mark node $NODE_NAME"
}

healthz_ok() { [ "$(curl -sS --max-time 3 "$HEALTHZ_URL" 2>/dev/null)" = ok ]; }

# node_ready_since SINCE VERSION: the Node is Ready with a heartbeat at or after SINCE (epoch
# seconds) from a kubelet reporting VERSION.
node_ready_since() {
	node_get
	[ "$API_CODE" = 200 ] || return 1
	printf '%s' "$NODE" | jq -e --argjson since "$1" --arg v "$2" '
		(.status.nodeInfo.kubeletVersion == $v)
		and ([.status.conditions[]? | select(.type == "Ready" and .status == "True"
			and (((.lastHeartbeatTime // "1970-01-01T00:00:00Z") | sub("\\.[0-9]+"; "") | fromdateiso8601) >= $since))]
			| length > 0)' >/dev/null
}

# ---- the host ----

# Bounded: a stop that hangs (TimeoutStopSec is 90 s by default) must not keep the lock past
# its lease; a timed-out restart counts as failed and is rolled back.
systemctl_() {
	# shellcheck disable=SC2086 # SYSTEMCTL is a command line
	timeout "$SYSTEMCTL_TIMEOUT_S" $SYSTEMCTL "$@"
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

dropin_text() {
	flags=""
	[ -z "$TRACING_ENDPOINT" ] || flags=" --config-dir=$CONFIG_DIR"
	[ -z "$EXTRA_FLAGS" ] || flags="$flags $EXTRA_FLAGS"
	cat <<EOF
# Written by the kubelet-rs Helm chart: runs kubelet-rs instead of the kubelet, with the
# flags kubeadm's drop-in and files give it. Removing this file (and daemon-reload, restart)
# brings the node's own kubelet back.
[Service]
ExecStart=
ExecStart=$BIN_DIR/kubelet \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS$flags
EOF
}

tracing_text() {
	cat <<EOF
# Written by the kubelet-rs Helm chart (tracing values).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
tracing:
  endpoint: "$TRACING_ENDPOINT"
EOF
	[ -z "$TRACING_SAMPLING_RATE" ] || printf '  samplingRatePerMillion: %s\n' "$TRACING_SAMPLING_RATE"
}

# write_file PATH MODE: stdin to PATH atomically.
write_file() {
	mkdir -p "$(dirname "$1")"
	cat >"$1.kubelet-rs.tmp"
	chmod "$2" "$1.kubelet-rs.tmp"
	mv -f "$1.kubelet-rs.tmp" "$1"
}

check_inputs() {
	[ -n "$NODE_NAME" ] || die "NODE_NAME is not set"
	[ -x "$KUBELET_SRC" ] || die "no kubelet binary at $KUBELET_SRC"
	[ -d "$HOST_ROOT/etc/systemd/system" ] || die "$HOST_ROOT/etc/systemd/system is missing: is the host's / mounted at $HOST_ROOT?"
	case "$EXTRA_FLAGS$TRACING_ENDPOINT" in
	*\"* | *\'* | *\\* | *%* | *\$*) die "EXTRA_FLAGS and TRACING_ENDPOINT may not hold quotes, backslashes, % or \$" ;;
	esac
	case "$TRACING_ENDPOINT" in *" "*) die "TRACING_ENDPOINT may not hold blanks" ;; esac
	case "$TRACING_SAMPLING_RATE" in "" | *[!0-9]*) [ -z "$TRACING_SAMPLING_RATE" ] ||
		die "TRACING_SAMPLING_RATE must be a whole number" ;; esac
	OUR_VERSION="$("$KUBELET_SRC" --version | awk '{ print $2 }')"
	[ -n "$OUR_VERSION" ] || die "$KUBELET_SRC --version printed no version"
	OUR_SHA="$(sha_of "$KUBELET_SRC")"
}

# Nothing of ours is left on the host afterwards; restarts the kubelet if the drop-in was there.
remove_from_host() {
	had_dropin=0
	[ ! -e "$HOST_ROOT$DROPIN" ] || had_dropin=1
	rm -f "$HOST_ROOT$DROPIN" "$HOST_ROOT$CONFIG_DIR/50-kubelet-rs-tracing.conf"
	rmdir "$HOST_ROOT$CONFIG_DIR" 2>/dev/null || true
	if [ "$had_dropin" = 1 ]; then
		systemctl_ daemon-reload || log "warning: daemon-reload failed"
		systemctl_ restart kubelet || log "warning: restarting the kubelet failed"
	fi
	# The binary goes after the restart: the kubelet that ran it has stopped.
	rm -f "$HOST_ROOT$BIN_DIR/kubelet" "$HOST_ROOT$BIN_DIR/kubelet.kubelet-rs.tmp"
	rmdir "$HOST_ROOT$BIN_DIR" "$(dirname "$HOST_ROOT$BIN_DIR")" 2>/dev/null || true
}

# Waits for the node's own kubelet after a rollback or an uninstall (report only).
wait_old_kubelet() {
	deadline=$(($(now_s) + ROLLBACK_DEADLINE_S))
	while [ "$(now_s)" -lt "$deadline" ]; do
		if healthz_ok; then
			log "the node's own kubelet answers healthz"
			return 0
		fi
		sleep 2
	done
	log "warning: the node's own kubelet did not answer healthz within ${ROLLBACK_DEADLINE_S}s"
	return 1
}

already_installed() {
	[ -f "$HOST_ROOT$DROPIN" ] && [ -f "$HOST_ROOT$BIN_DIR/kubelet" ] || return 1
	[ "$(sha_of "$HOST_ROOT$BIN_DIR/kubelet")" = "$OUR_SHA" ] || return 1
	[ "$(cat "$HOST_ROOT$DROPIN")" = "$(dropin_text)" ] || return 1
	if [ -n "$TRACING_ENDPOINT" ]; then
		[ "$(cat "$HOST_ROOT$CONFIG_DIR/50-kubelet-rs-tracing.conf" 2>/dev/null)" = "$(tracing_text)" ] || return 1
	else
		[ ! -e "$HOST_ROOT$CONFIG_DIR/50-kubelet-rs-tracing.conf" ] || return 1
	fi
	node_get
	[ "$(printf '%s' "$NODE" | jq -r --arg l "$STATE_LABEL" '.metadata.labels[$l] // ""')" = installed ] || return 1
	healthz_ok
}

# Prints "yes" when this very binary was rolled back on this node before.
rolled_back_before() {
	node_get
	printf '%s' "$NODE" | jq -r --arg l "$STATE_LABEL" --arg a "$ANN_PREFIX/sha256" --arg sha "$OUR_SHA" '
		if (.metadata.labels[$l] // "") == "rolled-back" and (.metadata.annotations[$a] // "") == $sha
		then "yes" else "no" end'
}

# The install itself; the caller holds the lock. Returns 1 after a rollback.
install_locked() {
	started="$(now_s)"
	log "installing kubelet-rs $OUR_VERSION (sha256 ${OUR_SHA%"${OUR_SHA#????????????}"}) as $BIN_DIR/kubelet"
	mkdir -p "$HOST_ROOT$BIN_DIR"
	cp "$KUBELET_SRC" "$HOST_ROOT$BIN_DIR/kubelet.kubelet-rs.tmp"
	chmod 0755 "$HOST_ROOT$BIN_DIR/kubelet.kubelet-rs.tmp"
	mv -f "$HOST_ROOT$BIN_DIR/kubelet.kubelet-rs.tmp" "$HOST_ROOT$BIN_DIR/kubelet"
	if [ -n "$TRACING_ENDPOINT" ]; then
		tracing_text | write_file "$HOST_ROOT$CONFIG_DIR/50-kubelet-rs-tracing.conf" 0644
	else
		rm -f "$HOST_ROOT$CONFIG_DIR/50-kubelet-rs-tracing.conf"
	fi
	dropin_text | write_file "$HOST_ROOT$DROPIN" 0644
	log "wrote $DROPIN; daemon-reload, restart kubelet"
	reason=""
	if ! systemctl_ daemon-reload; then
		reason="systemctl daemon-reload failed"
	elif ! systemctl_ restart kubelet; then
		reason="systemctl restart kubelet failed"
	fi
	restarted="$(now_s)"
	deadline=$((restarted + ROLLBACK_DEADLINE_S))
	# The Node reports the Kubernetes version, without our build metadata.
	want_version="${OUR_VERSION%%+*}"
	healthy=0 ready=0
	while [ -z "$reason" ]; do
		lock_renew
		[ "$healthy" = 1 ] || ! healthz_ok || {
			healthy=1
			log "healthz ok after $(($(now_s) - restarted))s"
		}
		if [ "$healthy" = 1 ] && node_ready_since "$restarted" "$want_version"; then
			ready=1
			log "node Ready after $(($(now_s) - restarted))s"
			break
		fi
		if [ "$(now_s)" -ge "$deadline" ]; then
			if [ "$healthy" = 0 ]; then
				reason="healthz ($HEALTHZ_URL) not ok within ${ROLLBACK_DEADLINE_S}s"
			else
				reason="node not Ready (kubelet $want_version, heartbeat after the restart) within ${ROLLBACK_DEADLINE_S}s"
			fi
			break
		fi
		sleep 2
	done
	if [ "$ready" = 1 ]; then
		node_mark installed "kubelet-rs $OUR_VERSION installed at $(micro_now) in $(($(now_s) - started))s"
		log "installed: kubelet-rs $OUR_VERSION runs on $NODE_NAME"
		return 0
	fi
	log "rolling back: $reason"
	remove_from_host
	wait_old_kubelet || true
	node_mark rolled-back "rolled back at $(micro_now): $reason"
	log "rolled back to the node's own kubelet"
	return 1
}

cmd_install() {
	check_inputs
	rm -f "$READY_FILE"
	if already_installed; then
		log "kubelet-rs $OUR_VERSION is already installed and healthy here"
		: >"$READY_FILE"
		return 0
	fi
	if [ "$(rolled_back_before)" = yes ]; then
		log "this binary was rolled back on $NODE_NAME before; not trying again (remove the node's $STATE_LABEL label and restart this pod to retry)"
		return 1
	fi
	lock_acquire
	rc=0
	install_locked || rc=$?
	lock_release
	[ "$rc" != 0 ] || : >"$READY_FILE"
	return "$rc"
}

cmd_uninstall() {
	[ -n "$NODE_NAME" ] || die "NODE_NAME is not set"
	rm -f "$READY_FILE"
	node_get
	state="$(printf '%s' "$NODE" | jq -r --arg l "$STATE_LABEL" '.metadata.labels[$l] // ""')"
	if [ ! -e "$HOST_ROOT$DROPIN" ] && [ ! -e "$HOST_ROOT$BIN_DIR/kubelet" ] && [ -z "$state" ]; then
		log "nothing of kubelet-rs on this node"
		return 0
	fi
	if [ -e "$HOST_ROOT$DROPIN" ]; then
		lock_acquire
		log "uninstalling: removing $DROPIN, restarting the node's own kubelet"
		remove_from_host
		wait_old_kubelet || true
		lock_release
	else
		remove_from_host
	fi
	node_mark "" ""
	log "uninstalled: the node's own kubelet runs again"
}

uninstall_requested() {
	api GET "/api/v1/namespaces/$NAMESPACE/configmaps/$CONFIGMAP_NAME"
	[ "$API_CODE" = 200 ] && [ "$(printf '%s' "$API_BODY" | jq -r '.data.uninstall // ""')" = true ]
}

cmd_run() {
	trap 'log "terminating"; rm -rf "$TMP"; exit 0' TERM INT
	if uninstall_requested; then
		log "uninstall requested (ConfigMap $NAMESPACE/$CONFIGMAP_NAME)"
	else
		cmd_install || log "not installed here; waiting (the pod stays unready)"
		while ! uninstall_requested; do
			sleep "$POLL_S" &
			wait $! || true
		done
		log "uninstall requested (ConfigMap $NAMESPACE/$CONFIGMAP_NAME)"
	fi
	cmd_uninstall
	log "done; sleeping until the chart removes this pod"
	while :; do
		sleep 3600 &
		wait $! || true
	done
}

cmd_wait_uninstalled() {
	api PATCH "/api/v1/namespaces/$NAMESPACE/configmaps/$CONFIGMAP_NAME" '{"data":{"uninstall":"true"}}' \
		application/merge-patch+json >/dev/null
	[ "$API_CODE" = 200 ] || die "could not set the uninstall flag in ConfigMap $NAMESPACE/$CONFIGMAP_NAME (HTTP $API_CODE)"
	log "uninstall flag set; waiting for every node labelled $STATE_LABEL to be undone"
	deadline=$(($(now_s) + WAIT_TIMEOUT_S))
	last=""
	while :; do
		api GET "/api/v1/nodes?labelSelector=$STATE_LABEL"
		if [ "$API_CODE" = 200 ]; then
			left="$(printf '%s' "$API_BODY" | jq -r '[.items[].metadata.name] | join(" ")')"
			if [ -z "$left" ]; then
				log "every node is back on its own kubelet"
				return 0
			fi
			[ "$left" = "$last" ] || log "still to undo: $left"
			last="$left"
		fi
		[ "$(now_s)" -lt "$deadline" ] || die "nodes still marked after ${WAIT_TIMEOUT_S}s: $last"
		sleep "$POLL_S"
	done
}

# The chart's tests source this file with INSTALLER_LIB=1 to call its functions one by one.
if [ "${INSTALLER_LIB:-0}" = 1 ]; then
	# shellcheck disable=SC2317 # return when sourced, exit when run
	return 0 2>/dev/null || exit 0
fi

case "${1:-}" in
run) cmd_run ;;
install) cmd_install ;;
uninstall) cmd_uninstall ;;
wait-uninstalled) cmd_wait_uninstalled ;;
*)
	sed -n '2,12p' "$0" >&2
	exit 2
	;;
esac
