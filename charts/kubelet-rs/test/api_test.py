#!/usr/bin/env python3
"""Usage: api_test.py CHART_DIR SCRATCH_DIR   (in run.sh's venv; needs the test control plane)

The installer's API side against the REAL test control plane (hack/cluster, kube-apiserver
v1.20.2 on this machine; `eval "$(hack/cluster/env.sh)"` gives its admin kubeconfig), with the
chart's own RBAC: the chart is rendered (helm-python-sdk) into the namespace krs-chart-test,
and its ServiceAccount, ClusterRole(Binding), Role(Binding), ConfigMap and Lease are applied;
the installer's functions (installer.sh sourced with INSTALLER_LIB=1, under busybox sh) then
run with that ServiceAccount's token over HTTPS:
  - the token is limited by the chart's RBAC (another Lease: 403);
  - the Lease lock: two holders at once never overlap; a live holder blocks until its lease
    runs out, then is taken over; the apiserver's resourceVersion conflicts do the rest;
  - marking a Node (label and annotations) and removing the marks, on a Node object of our own
    (krs-chart-test-node, no kubelet behind it);
  - every rendered object, DaemonSet and hook Job included, passes a server-side dry run;
  - the pre-delete Job's wait-uninstalled: fails while a Node is marked, succeeds once none is,
    and leaves the ConfigMap's uninstall flag "true".
Everything it creates is deleted at the end (namespace, cluster-scoped RBAC, Node). Exits
non-zero on the first failed check; exits 3 (skipped) when the control plane is not up.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import time

import helm_python as helm
import yaml

CHART, SCRATCH = sys.argv[1], os.path.abspath(sys.argv[2])
REPO = os.path.abspath(os.path.join(CHART, "../.."))
INSTALLER = os.path.join(CHART, "installer/installer.sh")
NS = "krs-chart-test"
RELEASE = "krs-chart-test"
FULL = f"{RELEASE}-kubelet-rs"
NODE = "krs-chart-test-node"
CHECKS = [0]


def log(msg):
    print(f"[chart-test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(cond, what):
    if not cond:
        raise SystemExit(f"[chart-test] FAIL: {what}")
    CHECKS[0] += 1
    log(f"ok: {what}")


def kubectl(*args, stdin=None, check_rc=True):
    r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=60)
    if check_rc and r.returncode != 0:
        raise SystemExit(f"[chart-test] FAIL: kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def cluster_env():
    r = subprocess.run([os.path.join(REPO, "hack/cluster/env.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    env = {}
    for line in r.stdout.splitlines():
        if line.startswith("export "):
            k, _, v = line[len("export "):].partition("=")
            env[k] = v.strip("'\"")
    return env


def lib_sh(script, env, timeout=120):
    """Runs SCRIPT in busybox sh after sourcing installer.sh."""
    return subprocess.run(["busybox", "sh", "-c", f". {INSTALLER}\n{script}"], env=env, capture_output=True,
                          text=True, timeout=timeout)


def cleanup():
    kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check_rc=False)
    kubectl("delete", "clusterrole,clusterrolebinding", FULL, "--ignore-not-found", check_rc=False)
    kubectl("delete", "node", NODE, "--ignore-not-found", check_rc=False)


def main():
    env = cluster_env()
    if env is None or subprocess.run(["kubectl", "--kubeconfig", env.get("KUBECONFIG", "/nonexistent"),
                                      "get", "--raw", "/readyz"], capture_output=True, timeout=20).returncode != 0:
        log("the test control plane is not up (hack/cluster/up.sh): skipped")
        sys.exit(3)
    os.environ["KUBECONFIG"] = env["KUBECONFIG"]
    cleanup()
    for _ in range(60):
        if kubectl("get", "namespace", NS, "--ignore-not-found").strip() == "":
            break
        time.sleep(1)
    os.makedirs(SCRATCH, exist_ok=True)
    try:
        run(env)
    finally:
        cleanup()
        shutil.rmtree(SCRATCH, ignore_errors=True)


def run(env):
    with helm.Chart.load(CHART) as chart:
        out = chart.render({"lockLeaseDurationSeconds": 6, "pollSeconds": 1}, name=RELEASE, namespace=NS, is_install=True)
    docs = [d for path, text in out.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    wanted = [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                                 "RoleBinding", "ConfigMap", "Lease")]
    kubectl("create", "namespace", NS)
    # Every rendered object, the DaemonSet and the hook Job included, passes the apiserver's
    # validation (a server-side dry run: nothing is created).
    dry = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs))
    check(len(docs) == 9 and dry.count("(server dry run)") == len(docs),
          f"all {len(docs)} rendered objects pass the apiserver's validation (server-side dry run)")
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(wanted))
    check(len(wanted) == 7, f"the chart's {len(wanted)} API objects applied to the real apiserver "
          f"({', '.join(d['kind'] for d in wanted)})")
    secret = ""
    for _ in range(30):
        secret = kubectl("-n", NS, "get", "sa", FULL, "-o", "jsonpath={.secrets[0].name}").strip()
        if secret:
            break
        time.sleep(1)
    token = base64.b64decode(kubectl("-n", NS, "get", "secret", secret, "-o", "jsonpath={.data.token}")).decode()
    token_file = os.path.join(SCRATCH, "token")
    with open(token_file, "w") as f:
        f.write(token)
    kubectl("create", "-f", "-", stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "labels": {"kubelet-rs.io/install": "true"}}}))
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "INSTALLER_LIB": "1", "API_URL": env["KRS_APISERVER"],
            "API_TOKEN_FILE": token_file, "API_CA_FILE": env["KRS_CLUSTER_CA"], "NAMESPACE": NS,
            "LEASE_NAME": f"{FULL}-lock", "CONFIGMAP_NAME": f"{FULL}-control", "NODE_NAME": NODE,
            "LEASE_DURATION_S": "6", "LOCK_RETRY_S": "1", "POLL_S": "1"}

    r = lib_sh('api GET "/apis/coordination.k8s.io/v1/namespaces/$NAMESPACE/leases/other"; echo "$API_CODE"\n'
               'api GET "/apis/coordination.k8s.io/v1/namespaces/$NAMESPACE/leases/$LEASE_NAME"; echo "$API_CODE"\n'
               'api GET "/api/v1/namespaces/kube-system/configmaps/kube-proxy"; echo "$API_CODE"', base)
    check(r.stdout.split() == ["403", "200", "403"],
          f"the service account's token over HTTPS: its Lease 200, another Lease and another namespace 403 ({' '.join(r.stdout.split())})")

    log("== the lock on the real apiserver: two holders at once")
    locker = ('lock_acquire; cut -d" " -f1 /proc/uptime >"$OUT.start"; sleep 3; '
              'cut -d" " -f1 /proc/uptime >"$OUT.end"; lock_release')
    procs = []
    for who in ("pod-x", "pod-y"):
        e = dict(base, HOLDER=who, OUT=os.path.join(SCRATCH, who))
        procs.append(subprocess.Popen(["busybox", "sh", "-c", f". {INSTALLER}\n{locker}"], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=60)[0] for p in procs]
    check(all(p.returncode == 0 for p in procs), "both holders got the lock and released it")
    iv = {}
    for who in ("pod-x", "pod-y"):
        with open(os.path.join(SCRATCH, who + ".start")) as s, open(os.path.join(SCRATCH, who + ".end")) as e:
            iv[who] = (float(s.read()), float(e.read()))
    (a, ia), (b, ib) = sorted(iv.items(), key=lambda kv: kv[1][0])
    check(ia[1] <= ib[0], f"held one after the other: {a} {ia[0]:.1f}-{ia[1]:.1f}, {b} {ib[0]:.1f}-{ib[1]:.1f} "
          f"({ib[0] - ia[1]:.1f}s between)")
    check(any("waiting for the lock" in o for o in outs), "the second one waited for the first")
    lease = json.loads(kubectl("-n", NS, "get", "lease", f"{FULL}-lock", "-o", "json"))
    check(lease["spec"].get("holderIdentity", "") == "" and lease["spec"].get("leaseTransitions", 0) >= 2,
          f"lease free afterwards, {lease['spec'].get('leaseTransitions')} transitions")

    log("== a live holder blocks until its lease runs out")
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    lease["spec"].update({"holderIdentity": "busy-pod", "renewTime": now, "acquireTime": now,
                          "leaseDurationSeconds": 6})
    kubectl("replace", "-f", "-", stdin=json.dumps(lease))
    t0 = time.time()
    r = lib_sh("lock_acquire; lock_release", dict(base, HOLDER="pod-z"))
    took = time.time() - t0
    check(r.returncode == 0 and "took over the lock from busy-pod" in r.stderr and took >= 5,
          f"waited {took:.1f}s for busy-pod's 6s lease, then took it over")

    log("== marks on a Node and the pre-delete Job's wait")
    r = lib_sh('OUR_VERSION=v1.34.0+kubelet-rs.0.1.0 OUR_SHA=abc; node_mark installed "test mark"', base)
    node = json.loads(kubectl("get", "node", NODE, "-o", "json"))
    check(r.returncode == 0 and node["metadata"]["labels"].get("kubelet-rs.io/state") == "installed"
          and node["metadata"]["annotations"].get("kubelet-rs.io/message") == "test mark",
          "node marked (label, annotations) through the chart's ClusterRole")
    r = lib_sh("cmd_wait_uninstalled", dict(base, WAIT_TIMEOUT_S="3", NODE_NAME=""))
    check(r.returncode != 0 and f"nodes still marked after 3s: {NODE}" in r.stderr,
          "wait-uninstalled fails while the node is marked")
    cm = json.loads(kubectl("-n", NS, "get", "configmap", f"{FULL}-control", "-o", "json"))
    check(cm["data"]["uninstall"] == "true", "it set the ConfigMap's uninstall flag")
    r = lib_sh('node_mark "" ""', base)
    node = json.loads(kubectl("get", "node", NODE, "-o", "json"))
    check(r.returncode == 0 and "kubelet-rs.io/state" not in node["metadata"].get("labels", {})
          and not any(k.startswith("kubelet-rs.io/") for k in node["metadata"].get("annotations", {})),
          "marks removed")
    r = lib_sh("cmd_wait_uninstalled", dict(base, WAIT_TIMEOUT_S="30", NODE_NAME=""))
    check(r.returncode == 0 and "every node is back" in r.stderr, "wait-uninstalled returns once no node is marked")
    log(f"PASS: {CHECKS[0]} checks against kube-apiserver v1.20.2")


if __name__ == "__main__":
    main()
