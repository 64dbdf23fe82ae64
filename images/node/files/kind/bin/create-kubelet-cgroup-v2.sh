#!/bin/sh
# cgroup v2: the kubelet's own cgroup (/kubelet) needs the controllers the pods use, enabled
# from the root down; kind's cgroupRoot is /kubelet.
set -eu
root=/sys/fs/cgroup
mkdir -p "$root/kubelet"
read -r controllers <"$root/cgroup.controllers" || true
for c in $controllers; do
	echo "+$c" >"$root/cgroup.subtree_control" 2>/dev/null || true
	echo "+$c" >"$root/kubelet/cgroup.subtree_control" 2>/dev/null || true
done
