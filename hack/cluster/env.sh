#!/usr/bin/env bash
# Usage: hack/cluster/env.sh [NAME]      eval "$(hack/cluster/env.sh)"
#
# Prints shell exports for the local control plane NAME (default "krs") made by up.sh:
#   KUBECONFIG                 admin kubeconfig (system:masters)
#   KRS_APISERVER              https://127.0.0.1:<port>
#   KRS_CLUSTER_CA             the cluster CA certificate (signs apiserver, client and CSR certs)
#   KRS_BOOTSTRAP_TOKEN        <id>.<secret>, group system:bootstrappers:kubeadm:default-node-token
#   KRS_BOOTSTRAP_KUBECONFIG   kubeconfig authenticating with that token (kubelet TLS bootstrap)
#   KRS_SERVICE_CIDR           10.96.0.0/12 (blackholed on this machine)
#   KRS_CLUSTER_DNS_DOMAIN     cluster.local (no DNS server runs)
#   KRS_NODE_IP                the machine's own address, for a kubelet's --node-ip
#   KRS_CLUSTER_NAME, KRS_CLUSTER_DIR, KRS_CLUSTER_RUN_DIR
# Fails if the cluster was never set up; does not check that it runs (up.sh does).
set -euo pipefail

# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ $# -gt 1 ]]; then
	echo "usage: $0 [NAME]" >&2
	exit 2
fi
cl_vars "${1:-$KRS_CL_DEFAULT_NAME}"
[[ -r "$CL_PORTS_FILE" && -r "$CL_PKI/ca.crt" ]] ||
	cl_die "cluster $CL_NAME not set up: run hack/cluster/up.sh $CL_NAME"
cl_load_ports
cl_print_env
