#!/usr/bin/env bash
# Usage: hack/cluster/kubelet-kubeconfig.sh NAME NODE OUT
#
# Writes OUT, a kubeconfig for the kubelet of node NODE on the local control plane NAME (made by
# up.sh): a fresh key and a client certificate CN=system:node:NODE, O=system:nodes signed by the
# cluster CA (valid one year), embedded with the CA and the apiserver's address. The Node
# authorizer and NodeRestriction then let it act for NODE only. The cluster need not be running.
set -euo pipefail

# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -ne 3 ]]; then
	echo "usage: $0 NAME NODE OUT" >&2
	exit 2
fi
cl_vars "$1"
node="$2"
out="$3"
# A node name is a DNS subdomain (RFC 1123), at most 253 characters.
[[ ${#node} -le 253 && "$node" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ ]] ||
	cl_die "node name '$node' is not a DNS subdomain"
[[ -r "$CL_PKI/ca.key" && -r "$CL_PORTS_FILE" ]] ||
	cl_die "cluster $CL_NAME not set up: run hack/cluster/up.sh $CL_NAME"
cl_load_ports

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cl_sign "$CL_PKI/ca" "$work/node" "/O=system:nodes/CN=system:node:$node" clientAuth
mkdir -p "$(dirname "$out")"
cl_write_kubeconfig "$out" "system:node:$node" "$work/node.crt" "$work/node.key"
cl_log "wrote $out for node $node"
