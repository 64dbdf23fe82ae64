#!/usr/bin/env bash
# Usage: e2e/node-e2e/config-agent.sh      (started by e2e/node-e2e/inside.sh only)
#
# Stands in, on the bed's side, for Dynamic Kubelet Config, which the v1.20 node e2e specs use to
# change the kubelet's configuration (setKubeletConfiguration in test/e2e_node/util.go): they
# put a KubeletConfiguration into a ConfigMap in kube-system, point the Node's
# spec.configSource at it and poll /configz until the kubelet runs with it. Neither kubelet does
# that here (ours has no Dynamic Kubelet Config, upstream removed it in v1.24, and the bed turns
# it off in upstream's with --dynamic-config-dir=): this agent watches the Node, and when
# spec.configSource names a new ConfigMap it writes the ConfigMap's "kubelet" key over the
# kubelet's config file and restarts the kubelet, as newer upstream node e2e does by hand.
# Both kubelets get the same treatment. Runs until killed.
set -euo pipefail
# shellcheck source=e2e/node-e2e/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
KUBECTL=(timeout 10 "${NE2E_KUBECTL:?}" --kubeconfig="$NE2E_KUBECONFIG")

last=""
# The last error of reading the Node, logged once until it changes (the Node is missing until
# the kubelet registers; a wrong address would otherwise fail in silence).
last_err=""
while :; do
	sleep 1 &
	wait $! || true
	[[ -f "$NE2E_KUBECONFIG" ]] || continue
	if ! src="$("${KUBECTL[@]}" get node "$NE2E_NODE" -o \
		jsonpath='{.spec.configSource.configMap.namespace}/{.spec.configSource.configMap.name}/{.spec.configSource.configMap.kubeletConfigKey}' 2>"$NE2E_ARTIFACTS/config-agent.err")"; then
		err="$(head -c 300 "$NE2E_ARTIFACTS/config-agent.err")"
		[[ "$err" == "$last_err" ]] || ne2e_log "config agent: reading Node $NE2E_NODE: $err"
		last_err="$err"
		continue
	fi
	last_err=""
	[[ "$src" != "//" && "$src" != "$last" ]] || continue
	IFS=/ read -r ns name key <<<"$src"
	data="$("${KUBECTL[@]}" get configmap -n "$ns" "$name" -o go-template="{{index .data \"$key\"}}" 2>/dev/null)" || {
		ne2e_log "config agent: cannot read ConfigMap $ns/$name yet"
		continue
	}
	last="$src"
	if [[ -z "$data" || "$data" == "<no value>" ]]; then
		ne2e_log "config agent: ConfigMap $ns/$name has nothing under \"$key\": the config file is left as it is"
		continue
	fi
	printf '%s\n' "$data" >"$NE2E_KUBELET_CONFIG.new"
	mv -f "$NE2E_KUBELET_CONFIG.new" "$NE2E_KUBELET_CONFIG"
	cp "$NE2E_KUBELET_CONFIG" "${NE2E_ARTIFACTS:?}/kubelet-config.$name"
	ne2e_log "config agent: the Node names ConfigMap $ns/$name: written to $NE2E_KUBELET_CONFIG"
	ne2e_restart_kubelet "new configuration from ConfigMap $ns/$name"
done
