#!/usr/bin/env bash
# Usage: e2e/vm/kubeadm.sh [--check]     (e2e/vm/run.sh kubeadm; a bed of N VMs up, as root)
#
# A kubeadm v1.20.2 cluster of the bed's VMs, with our kubelet (the .deb `up` installed) on
# every node:
#   1. into every VM: kubeadm and kubectl of the upstream build (hack/upstream/build.sh), the
#      drop-in kubeadm's package installs (images/node/files/.../10-kubeadm.conf, the same file
#      the kind node image carries), the kubelet restarted under it (it then waits for kubeadm's
#      files, as with upstream's packages), e2e/kubeadm's crictl stand-in (no registry here serves
#      cri-tools; e2e/kubeadm/crictl.py says why) with the grpcio it runs on, and the images
#      (e2e/kubeadm/images.sh: the control plane's on vm1, kube-proxy, pause and busybox on all);
#   2. `kubeadm init` on vm1 (systemd cgroup driver, the VM's address, addon/coredns skipped:
#      no image of it can be made here), then `kubeadm join` on vm2..vmN with a bootstrap token
#      and the CA's hash (TLS bootstrap of our kubelet);
#   3. every node Ready; prints `kubectl get nodes -o wide` and the times.
# Pods reach each other across VMs by the routes `up` set (10.244.i.0/24 via vmI); there is no
# CNI daemon to install.
#
# When vm1 has run `kubeadm init` already, the cluster is taken as it is (for --check).
#
# --check then judges the cluster (it needs 2 VMs or more): a Deployment of 4 replicas spread
# over the nodes (a topology spread on the hostname; the control plane's taint tolerated), pod
# to pod traffic from a pod on vm1 to one on every other VM, `kubectl logs`, `exec` and
# `port-forward` to a pod on vm2 (the joined node), then `kubectl drain vm2` and `kubeadm reset -f`
# on vm2, and the node left clean: no container, no process in a pod cgroup, no kubelet.conf, no
# pod folder.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=e2e/vm/lib.sh
source "$HERE/lib.sh"
# shellcheck source=e2e/kubeadm/lib.sh
source "$VM_REPO/e2e/kubeadm/lib.sh"

KUBE_VERSION=v1.20.2
DROPIN="$VM_REPO/images/node/files/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
# Preflight errors of this bed, each named (e2e/kubeadm/run.sh says why for both): our kubelet
# reports a newer version than v1.20's kubeadm accepts; no CoreDNS image can be made here.
IGNORE_PREFLIGHT=KubeletVersion,ImagePull
SKIP_PHASES=addon/coredns
CRI_SOCKET=/run/containerd/containerd.sock
READY_TIMEOUT="${KRS_VM_READY_TIMEOUT:-600}"
KUBECTL="kubectl --kubeconfig /etc/kubernetes/admin.conf"

in_vm() {
	local i="$1"
	shift
	vm_ssh "$i" "$@"
}

# crictl_site PYVER: prints a folder with the grpcio, protobuf and typing_extensions of the bed's
# venv (the same pins, so the stubs it generated load) built for the VM's Python PYVER (3.11 on
# bookworm, 3.13 on trixie): the venv's own wheels suit only its own Python version. The wheels
# come from PyPI, as the venv's did (pip --target for that version, binary only), once per
# version and pins, cached under $KRS_CACHE_DIR/kubeadm.
crictl_site() {
	local pyver="$1" pins key dir
	pins="$("$PY" -c 'from importlib.metadata import version as v
print(" ".join(f"{p}=={v(p)}" for p in ("grpcio", "protobuf", "typing_extensions")))')"
	key="$(printf '%s %s' "$pyver" "$pins" | sha256sum | cut -c1-16)"
	dir="${KRS_CACHE_DIR:-/var/cache/kubelet-rs}/kubeadm/crictl-site-py$pyver-$key"
	if [[ ! -e "$dir/.krs-pins" ]]; then
		vm_log "crictl stand-in: $pins for Python $pyver"
		rm -rf "$dir.tmp"
		# shellcheck disable=SC2086 # $pins is a list of words
		timeout 600 "$PY" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
			--implementation cp --python-version "$pyver" --platform manylinux_2_17_x86_64 \
			--target "$dir.tmp" $pins >&2 ||
			vm_die "no wheels of $pins for Python $pyver (pip install --target)"
		echo "$pins" >"$dir.tmp/.krs-pins"
		rm -rf "$dir"
		mv "$dir.tmp" "$dir"
	fi
	echo "$dir"
}

# install_crictl INDEX: crictl.py, its runtime.v1 modules and the packages they load
# (crictl_site, for the VM's own Python), behind /usr/local/bin/crictl.
install_crictl() {
	local i="$1" pyver site
	pyver="$(in_vm "$i" 'python3 -c "import sys; print(\"%d.%d\" % sys.version_info[:2])"' </dev/null)" ||
		vm_die "vm$i: python3 does not run"
	site="$(crictl_site "$pyver")"
	in_vm "$i" 'rm -rf /opt/krs-crictl && mkdir -p /opt/krs-crictl/site-packages /opt/krs-crictl/stubs'
	tar -C "$site" -cf - --exclude=__pycache__ --exclude='*.dist-info' --exclude=.krs-pins . |
		in_vm "$i" 'tar -C /opt/krs-crictl/site-packages -xf -'
	vm_copy "$i" "$VM_REPO/e2e/kubeadm/crictl.py" /opt/krs-crictl/crictl.py
	vm_copy "$i" "$STUBS"/api_pb2.py "$STUBS"/api_pb2_grpc.py /opt/krs-crictl/stubs/
	printf '%s\n' '#!/bin/sh' '# e2e/vm: the crictl stand-in of e2e/kubeadm (crictl.py says why)' \
		'PYTHONPATH=/opt/krs-crictl/site-packages exec python3 /opt/krs-crictl/crictl.py --stubs /opt/krs-crictl/stubs "$@"' |
		in_vm "$i" 'cat >/usr/local/bin/crictl && chmod 0755 /usr/local/bin/crictl'
	in_vm "$i" 'crictl --runtime-endpoint unix:///run/containerd/containerd.sock version >/dev/null' ||
		vm_die "vm$i: the crictl stand-in does not answer"
}

# The images of e2e/kubeadm/images.sh: every one on vm1, the node's own on the others.
install_parts() {
	local nodes="$1" list="$VM_RUN/kubeadm-images.list" i line tar names lines=()
	vm_log "kubeadm images (e2e/kubeadm/images.sh)"
	"$VM_REPO/e2e/kubeadm/images.sh" "$list" 2>/dev/null
	# Read before the loop: ssh in the loop would read the rest of the list as its stdin.
	mapfile -t lines <"$list"
	for ((i = 1; i <= nodes; i++)); do
		local t0=$SECONDS n=0
		in_vm "$i" 'mkdir -p /var/tmp/krs-kubeadm /etc/systemd/system/kubelet.service.d'
		vm_copy "$i" "$(krs_upstream_bin kubeadm)" "$(krs_upstream_bin kubectl)" /usr/bin/
		vm_copy "$i" "$DROPIN" /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
		install_crictl "$i"
		for line in "${lines[@]}"; do
			tar="${line%% *}"
			names="${line#* }"
			if ((i > 1)) && ! [[ "$names" =~ kube-proxy|pause|busybox ]]; then
				continue
			fi
			vm_copy "$i" "$tar" /var/tmp/krs-kubeadm/image.tar
			in_vm "$i" 'ctr -n k8s.io images import --all-platforms /var/tmp/krs-kubeadm/image.tar >/dev/null' ||
				vm_die "vm$i: importing $(basename "$tar") failed"
			n=$((n + 1))
		done
		in_vm "$i" 'rm -rf /var/tmp/krs-kubeadm; systemctl daemon-reload; systemctl restart kubelet'
		vm_log "vm$i: kubeadm, kubectl, the drop-in, crictl and $n images in $((SECONDS - t0)) s"
	done
}

init_config() {
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta2
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $(vm_ip 1)
  bindPort: 6443
nodeRegistration:
  criSocket: $CRI_SOCKET
  kubeletExtraArgs:
    node-ip: $(vm_ip 1)
---
apiVersion: kubeadm.k8s.io/v1beta2
kind: ClusterConfiguration
kubernetesVersion: $KUBE_VERSION
clusterName: krs-vm
networking:
  serviceSubnet: $VM_SERVICE_SUBNET
  dnsDomain: cluster.local
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# containerd runs runc with SystemdCgroup (e2e/vm/guest/containerd.toml); kubeadm v1.20 leaves
# the driver to the user.
cgroupDriver: systemd
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
EOF
}

join_config() {
	local i="$1" token="$2" hash="$3"
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta2
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: $(vm_ip 1):6443
    token: $token
    caCertHashes: [$hash]
nodeRegistration:
  criSocket: $CRI_SOCKET
  kubeletExtraArgs:
    node-ip: $(vm_ip "$i")
EOF
}

# wait_vm1 WHAT SECONDS SHELL: until SHELL succeeds on vm1.
wait_vm1() {
	local t0=$SECONDS
	vm_wait 1 "$2" "$3" || vm_die "$1: not within $2 s"
	vm_log "$1 ($((SECONDS - t0)) s)"
}

make_cluster() {
	local nodes="$1" t0 i
	t0=$SECONDS
	init_config | in_vm 1 'cat >/root/kubeadm-init.yaml'
	vm_log "vm1: kubeadm init (log /root/kubeadm-init.log in vm1)"
	if ! in_vm 1 "kubeadm init --config /root/kubeadm-init.yaml --ignore-preflight-errors=$IGNORE_PREFLIGHT --skip-phases=$SKIP_PHASES -v=1 >/root/kubeadm-init.log 2>&1"; then
		in_vm 1 'tail -30 /root/kubeadm-init.log; journalctl -u kubelet --no-pager -n 30' >&2 || true
		vm_die "kubeadm init failed on vm1"
	fi
	local init_s=$((SECONDS - t0))
	vm_log "vm1: kubeadm init succeeded in $init_s s"
	local join token hash
	join="$(in_vm 1 'kubeadm token create --print-join-command 2>/dev/null')"
	token="$(sed -n 's/.*--token \([^ ]*\).*/\1/p' <<<"$join")"
	hash="$(sed -n 's/.*--discovery-token-ca-cert-hash \([^ ]*\).*/\1/p' <<<"$join")"
	[[ -n "$token" && -n "$hash" ]] || vm_die "no join command from vm1: $join"
	for ((i = 2; i <= nodes; i++)); do
		local tj=$SECONDS
		join_config "$i" "$token" "$hash" | in_vm "$i" 'cat >/root/kubeadm-join.yaml'
		vm_log "vm$i: kubeadm join (log /root/kubeadm-join.log in vm$i)"
		if ! in_vm "$i" "kubeadm join --config /root/kubeadm-join.yaml --ignore-preflight-errors=$IGNORE_PREFLIGHT -v=1 >/root/kubeadm-join.log 2>&1"; then
			in_vm "$i" 'tail -30 /root/kubeadm-join.log; journalctl -u kubelet --no-pager -n 30' >&2 || true
			vm_die "kubeadm join failed on vm$i"
		fi
		vm_log "vm$i: kubeadm join succeeded in $((SECONDS - tj)) s"
	done
	wait_vm1 "all $nodes nodes Ready" "$READY_TIMEOUT" \
		"[ \"\$($KUBECTL get nodes --no-headers | awk '\$2 == \"Ready\"' | wc -l)\" = $nodes ]"
	in_vm 1 "$KUBECTL get nodes -o wide"
	vm_log "cluster of $nodes nodes in $((SECONDS - t0)) s (kubeadm init $init_s s)"
}

DEPLOYMENT=$(
	cat <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 4
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      tolerations:
      - {key: node-role.kubernetes.io/master, operator: Exists, effect: NoSchedule}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: web}
      containers:
      - name: web
        image: docker.io/library/busybox:1.36
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && echo serving && exec httpd -f -p 8080 -h /www"]
        ports:
        - containerPort: 8080
EOF
)

# pod_on NODE: a Running web pod's "name ip" on NODE.
pod_on() {
	in_vm 1 "$KUBECTL get pods -l app=web -o jsonpath='{range .items[?(@.spec.nodeName==\"$1\")]}{.metadata.name} {.status.podIP} {.status.phase}{\"\\n\"}{end}'" |
		awk '$3 == "Running" { print $1, $2; exit }'
}

check_cluster() {
	local nodes="$1" i t0=$SECONDS
	((nodes >= 2)) || vm_die "--check needs 2 VMs or more (e2e/vm/run.sh up --nodes 2)"
	in_vm 1 "$KUBECTL apply -f -" <<<"$DEPLOYMENT" >/dev/null
	wait_vm1 "Deployment web: 4 replicas available" 600 \
		"[ \"\$($KUBECTL get deploy web -o jsonpath='{.status.availableReplicas}')\" = 4 ]"
	in_vm 1 "$KUBECTL get pods -l app=web -o wide"
	local from from_ip to to_ip got
	read -r from from_ip <<<"$(pod_on vm1)"
	[[ -n "$from" ]] || vm_die "no web pod on vm1"
	for ((i = 2; i <= nodes; i++)); do
		read -r to to_ip <<<"$(pod_on "vm$i")"
		[[ -n "$to" ]] || vm_die "no web pod on vm$i: the Deployment did not spread"
		# nc, not wget: the busybox-static wget dies of SIGSEGV here (exit 139), whatever the address.
		got="$(in_vm 1 "$KUBECTL exec $from -- sh -c 'printf \"GET / HTTP/1.0\\r\\n\\r\\n\" | nc -w 10 $to_ip 8080'" | tail -1)" ||
			vm_die "pod $from ($from_ip, vm1) could not reach $to ($to_ip, vm$i)"
		[[ "$got" == "$to" ]] || vm_die "pod-to-pod: $to_ip answered '$got', not '$to'"
		vm_log "ok: pod $from on vm1 -> pod $to on vm$i ($to_ip): '$got'"
	done
	read -r to to_ip <<<"$(pod_on vm2)"
	in_vm 1 "$KUBECTL logs $to" | grep -qx serving || vm_die "kubectl logs $to (on vm2)"
	vm_log "ok: kubectl logs $to (on vm2)"
	got="$(in_vm 1 "$KUBECTL exec $to -- cat /www/index.html")"
	[[ "$got" == "$to" ]] || vm_die "kubectl exec $to (on vm2): '$got'"
	vm_log "ok: kubectl exec $to (on vm2)"
	got="$(in_vm 1 "$KUBECTL port-forward pod/$to 18080:8080 >/tmp/pf.log 2>&1 & pf=\$!; for n in \$(seq 1 30); do curl -sf --max-time 5 http://127.0.0.1:18080/ && break; sleep 1; done; kill \$pf")"
	[[ "$got" == "$to" ]] || vm_die "kubectl port-forward $to (on vm2): '$got'"
	vm_log "ok: kubectl port-forward pod/$to 18080:8080 (on vm2)"

	vm_log "vm2: kubeadm reset -f"
	in_vm 1 "$KUBECTL drain vm2 --ignore-daemonsets --delete-emptydir-data --force --timeout=300s >/dev/null 2>&1 || $KUBECTL drain vm2 --ignore-daemonsets --delete-local-data --force --timeout=300s >/dev/null" ||
		vm_die "kubectl drain vm2"
	in_vm 2 'kubeadm reset -f >/root/kubeadm-reset.log 2>&1' || vm_die "kubeadm reset -f on vm2"
	local left
	# Empty pod slices stay: the kubelet is stopped before the pods go, so nothing stops their
	# transient units (a process in one would be a leak).
	left="$(in_vm 2 'ctr -n k8s.io tasks ls -q; ctr -n k8s.io containers ls -q; ls /etc/kubernetes/kubelet.conf /var/lib/kubelet/pods 2>/dev/null; find /sys/fs/cgroup/kubepods.slice -name cgroup.procs -exec cat {} + 2>/dev/null')" || true
	[[ -z "$left" ]] || vm_die "kubeadm reset on vm2 left: $left"
	vm_log "ok: kubeadm reset -f on vm2 left no container, task, process in a pod cgroup, pod folder or kubelet.conf"
	vm_log "check passed in $((SECONDS - t0)) s"
}

main() {
	local check=0
	case "${1:-}" in
	--check) check=1 ;;
	"") ;;
	*)
		sed -n '2p' "${BASH_SOURCE[0]}" >&2
		exit 2
		;;
	esac
	vm_require_root
	local nodes
	nodes="$(vm_nodes)"
	((nodes > 0)) || vm_die "no VM bed is up: e2e/vm/run.sh up --nodes 2"
	if in_vm 1 'test -e /etc/kubernetes/admin.conf'; then
		vm_log "vm1 has run kubeadm init already: using its cluster"
	else
		krs_upstream_ensure kubeadm
		crictl_stubs
		install_parts "$nodes"
		make_cluster "$nodes"
	fi
	((check == 0)) || check_cluster "$nodes"
}

main "$@"
