#!/usr/bin/env python3
"""Usage: installer_test.py SCRATCH_DIR   (as root; started by charts/kubelet-rs/test/run.sh)

Tests charts/kubelet-rs/installer/installer.sh against host directories driven by a REAL
systemd: each test node is hack/testbed/systemd-node.sh (systemd as PID 1 of its own PID and
mount namespace), whose kubelet.service and kubeadm drop-in come from the test host folder, so
the installer's `systemctl daemon-reload` / `restart kubelet` and its drop-in are read by
systemd itself. Stand-ins, and why:
  - the kubelets (fake_kubelet.py): the node's own and the one the installer copies; each
    serves /healthz and reports the Node's Ready condition and version, as a kubelet does
    (running two real kubelets with containerds per node is out of this test's scope);
  - the apiserver (fake_apiserver.py on loopback): Nodes, the ConfigMap and the Lease with
    resourceVersion conflicts, so several nodes can be driven without touching the shared
    control plane.
Inside each systemd node's mount namespace only, the host folder's opt/, var/lib/kubelet/ and
etc/default/ are mounted over the machine's /opt, /var/lib/kubelet and /etc/default, so the
paths in the units and the drop-in are the real ones; the node's own kubelet is at
<host>/usr/bin/kubelet (this machine has no /usr/bin/kubelet to mount over), the one path the
unit fixtures change. Cases: install, idempotent re-run, uninstall, rollback when healthz
fails, rollback when Ready fails, no retry of a rolled-back binary, the lock (a live holder
blocks until its lease expires, a stale holder is taken over, two nodes at once never
overlap), and the pre-delete hook's flow (`run` pods + `wait-uninstalled`), plus the hook
timing out. Exits non-zero on the first failed check.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../../.."))
INSTALLER = os.path.join(REPO, "charts/kubelet-rs/installer/installer.sh")
SYSTEMD_NODE = os.path.join(REPO, "hack/testbed/systemd-node.sh")
SCRATCH = os.path.abspath(sys.argv[1])
TOKEN = "test-token-" + hashlib.sha256(os.urandom(8)).hexdigest()[:12]
NAMESPACE = "kubelet-rs"
DEADLINE_S = 10
NODES = ["a", "b"]
PROCS = []
CHECKS = [0]


def log(msg):
    print(f"[chart-test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(cond, what):
    if not cond:
        raise SystemExit(f"[chart-test] FAIL: {what}")
    CHECKS[0] += 1
    log(f"ok: {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


API_PORT = free_port()
API = f"http://127.0.0.1:{API_PORT}"


def api(method, path, body=None, ctype="application/json"):
    req = urllib.request.Request(API + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


# The units as kubeadm's packages install them (kubelet.service from kubernetes/release's
# rpm/deb specs, 10-kubeadm.conf as in e2e/kubeadm/kubelet-service.sh); only the old kubelet's
# path differs (see the module's doc).
KUBELET_SERVICE = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=@OLD@
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""
KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=@OLD@ $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
KUBEADM_ARGS = ["--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
                "--node-ip=10.91.0.2", "--pod-infra-container-image=registry.k8s.io/pause:3.10"]
BASE_ARGS = ["--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
             "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
             *KUBEADM_ARGS, "--v=2"]
EXTRA_FLAGS = ["--v=4", "--node-labels=kubelet-rs.io/test=yes"]
TRACING = "127.0.0.1:4317"


# Folders made on the machine for a bind mount to cover (a fresh machine has no
# /var/lib/kubelet), removed again at the end, deepest first.
MADE_DIRS = []


def make_mount_point(path):
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for d in reversed(missing):
        os.mkdir(d)
        MADE_DIRS.append(d)


def remove_mount_points():
    left = []
    for d in reversed(MADE_DIRS):
        try:
            os.rmdir(d)
        except OSError as e:
            left.append(f"{d} ({e})")
    if left:
        raise SystemExit("[chart-test] FAIL: made empty for the nodes' bind mounts, not removable: "
                         + ", ".join(left))


class Node:
    def __init__(self, name):
        self.name = name
        self.sd = f"krs-chart-{name}"
        self.dir = os.path.join(SCRATCH, name)
        self.host = os.path.join(self.dir, "host")
        self.port = free_port()
        self.old = os.path.join(self.host, "usr/bin/kubelet")
        self.units = os.path.join(self.host, "etc/systemd/system")
        self.dropin = os.path.join(self.units, "kubelet.service.d/90-kubelet-rs.conf")
        self.ours = os.path.join(self.host, "opt/kubelet-rs/bin/kubelet")
        self.kdir = os.path.join(self.host, "var/lib/kubelet")

    def setup(self):
        write(os.path.join(self.units, "kubelet.service"), KUBELET_SERVICE.replace("@OLD@", self.old))
        write(os.path.join(self.units, "kubelet.service.d/10-kubeadm.conf"),
              KUBEADM_DROPIN.replace("@OLD@", self.old))
        write(os.path.join(self.kdir, "kubeadm-flags.env"),
              'KUBELET_KUBEADM_ARGS="' + " ".join(KUBEADM_ARGS) + '"\n')
        write(os.path.join(self.kdir, "config.yaml"),
              "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
        write(os.path.join(self.host, "etc/default/kubelet"), "KUBELET_EXTRA_ARGS=--v=2\n")
        os.makedirs(os.path.join(self.host, "opt"), exist_ok=True)
        os.makedirs(os.path.join(self.host, "etc/kubernetes"), exist_ok=True)
        write(self.old, read(os.path.join(HERE, "fake_kubelet.py")).replace("@ROLE@", "old"), 0o755)
        self.set_mode("ok")
        api("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": self.name, "labels": {"kubelet-rs.io/install": "true"}}, "status": {}})
        subprocess.run([SYSTEMD_NODE, "stop", self.sd], check=True, capture_output=True)
        subprocess.run([SYSTEMD_NODE, "start", self.sd], check=True, stdout=subprocess.DEVNULL)
        for src, dst in (("opt", "/opt"), ("var/lib/kubelet", "/var/lib/kubelet"),
                         ("etc/default", "/etc/default")):
            make_mount_point(dst)
            self.node_exec("mount", "--bind", os.path.join(self.host, src), dst)
        # The node's systemd reads units only from its own folder: the host's unit and drop-in
        # folder are linked there, so it reads the files the installer writes.
        node_units = f"/var/lib/kubelet-rs/systemd-nodes/{self.sd}/units"
        # kubelet.service has default dependencies (sysinit.target, basic.target,
        # shutdown.target) and wants network-online.target: empty targets stand for them, as
        # the test node boots nothing of a real system.
        for target in ("sysinit", "basic", "shutdown", "network-online", "multi-user"):
            write(os.path.join(node_units, f"{target}.target"),
                  f"[Unit]\nDescription={target} (empty, test node)\nDefaultDependencies=no\n")
        os.symlink(os.path.join(self.units, "kubelet.service"), os.path.join(node_units, "kubelet.service"))
        os.symlink(os.path.join(self.units, "kubelet.service.d"), os.path.join(node_units, "kubelet.service.d"))
        self.systemctl("daemon-reload")
        self.systemctl("start", "kubelet")
        # Node a's installer reaches systemd through systemd-node.sh; node b's as in the pod:
        # busybox nsenter into its PID 1's namespaces, then systemctl.
        if self.name == "a":
            self.systemctl_cmd = f"{SYSTEMD_NODE} exec {self.sd} systemctl"
        else:
            pid = subprocess.run([SYSTEMD_NODE, "pid", self.sd], check=True, capture_output=True,
                                 text=True).stdout.strip()
            self.systemctl_cmd = f"busybox nsenter -t {pid} -m -u -i -n -p -- systemctl"
        check(self.wait_healthz(), f"node {self.name}: its own kubelet runs under systemd and answers healthz")

    def set_mode(self, mode):
        write(os.path.join(self.kdir, "fake.json"), json.dumps(
            {"node": self.name, "api": API, "token": TOKEN, "port": self.port, "new_mode": mode}))

    def node_exec(self, *cmd, capture=False):
        return subprocess.run([SYSTEMD_NODE, "exec", self.sd, *cmd], check=True, text=True,
                              capture_output=capture).stdout

    def systemctl(self, *args):
        return self.node_exec("systemctl", *args, capture=True)

    def show(self, prop):
        return self.systemctl("show", "kubelet", "-p", prop, "--value").strip()

    def healthz(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return r.read() == b"ok"
        except OSError:
            return False

    def wait_healthz(self, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            if self.healthz():
                return True
            time.sleep(0.3)
        return False

    def running_role(self):
        """The role of the process systemd runs as the kubelet (from its command line)."""
        pid = self.show("MainPID")
        if pid in ("", "0"):
            return None
        # MainPID is in the node's PID namespace: read its command line from there.
        cmdline = self.node_exec("cat", f"/proc/{pid}/cmdline", capture=True).split("\0")
        return {self.old: "old", "/opt/kubelet-rs/bin/kubelet": "new"}.get(cmdline[1], cmdline[1])

    def starts(self):
        path = os.path.join(self.kdir, "starts.log")
        return [json.loads(line) for line in read(path).splitlines()] if os.path.exists(path) else []

    def node(self):
        return api("GET", f"/api/v1/nodes/{self.name}")

    def state(self):
        return self.node()["metadata"].get("labels", {}).get("kubelet-rs.io/state")

    def env(self, holder=None, **extra):
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOST_ROOT": self.host,
            "SYSTEMCTL": self.systemctl_cmd, "NODE_NAME": self.name,
            "HOLDER": holder or f"pod-{self.name}", "API_URL": API,
            "API_TOKEN_FILE": os.path.join(SCRATCH, "token"), "API_CA_FILE": "",
            "NAMESPACE": NAMESPACE, "LEASE_NAME": "kubelet-rs-install-lock",
            "CONFIGMAP_NAME": "kubelet-rs-control", "KUBELET_SRC": os.path.join(SCRATCH, "new-kubelet"),
            "EXTRA_FLAGS": " ".join(EXTRA_FLAGS), "TRACING_ENDPOINT": TRACING,
            "TRACING_SAMPLING_RATE": "1000000", "HEALTHZ_URL": f"http://127.0.0.1:{self.port}/healthz",
            "ROLLBACK_DEADLINE_S": str(DEADLINE_S), "LEASE_DURATION_S": "8", "POLL_S": "1",
            "LOCK_RETRY_S": "1", "READY_FILE": os.path.join(self.dir, "ready"),
        }
        env.update(extra)
        return env

    def installer(self, cmd, log_name, background=False, **extra):
        """Runs installer.sh with busybox's sh, as in the image."""
        logf = open(os.path.join(self.dir, log_name), "w")
        p = subprocess.Popen(["busybox", "sh", INSTALLER, cmd], env=self.env(**extra),
                             stdout=logf, stderr=subprocess.STDOUT)
        if background:
            PROCS.append(p)
            return p
        rc = p.wait()
        return rc, read(os.path.join(self.dir, log_name))

    def teardown(self):
        subprocess.run([SYSTEMD_NODE, "stop", self.sd], capture_output=True)
        shutil.rmtree(f"/var/lib/kubelet-rs/systemd-nodes/{self.sd}", ignore_errors=True)


def expect_clean(n, what):
    """Nothing of ours on the host, the old kubelet active under systemd, the node unmarked."""
    check(not os.path.exists(n.dropin) and not os.path.exists(n.ours)
          and not os.path.exists(os.path.join(n.host, "etc/kubernetes/kubelet-rs.conf.d"))
          and not os.path.exists(os.path.join(n.host, "opt/kubelet-rs")),
          f"{what}: drop-in, binary, tracing config and their folders removed")
    check(sha(os.path.join(n.units, "kubelet.service.d/10-kubeadm.conf")) == n.kubeadm_sha
          and sha(os.path.join(n.units, "kubelet.service")) == n.unit_sha and sha(n.old) == n.old_sha,
          f"{what}: kubelet.service, 10-kubeadm.conf and the old binary unchanged")
    check(n.show("ActiveState") == "active" and n.running_role() == "old" and n.healthz(),
          f"{what}: systemd runs the node's own kubelet again (active, healthz ok)")
    check(n.show("DropInPaths").split() == [os.path.join(n.units, "kubelet.service.d/10-kubeadm.conf")],
          f"{what}: systemd sees only kubeadm's drop-in")


def lease():
    return api("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kubelet-rs-install-lock")


def set_lease(holder, renewed_ago, duration):
    cur = lease()
    t = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - renewed_ago))
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kubelet-rs-install-lock", "namespace": NAMESPACE},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "acquireTime": t, "renewTime": t}}
    if cur is None:
        api("POST", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", body)
    else:
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        api("PUT", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/kubelet-rs-install-lock", body)


def test_install(n):
    t0 = time.time()
    rc, out = n.installer("install", "install.log")
    took = time.time() - t0
    check(rc == 0 and os.path.exists(n.env()["READY_FILE"]), f"install on {n.name}: exit 0, readiness file written ({took:.1f}s)")
    check(sha(n.ours) == sha(os.path.join(SCRATCH, "new-kubelet")) and os.stat(n.ours).st_mode & 0o777 == 0o755,
          "binary copied to /opt/kubelet-rs/bin/kubelet (same sha256, mode 0755)")
    check(sha(n.old) == n.old_sha and sha(os.path.join(n.units, "kubelet.service.d/10-kubeadm.conf")) == n.kubeadm_sha
          and sha(os.path.join(n.units, "kubelet.service")) == n.unit_sha,
          "old binary, kubelet.service and 10-kubeadm.conf untouched")
    want = ("ExecStart=\nExecStart=/opt/kubelet-rs/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
            "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --config-dir=/etc/kubernetes/kubelet-rs.conf.d "
            + " ".join(EXTRA_FLAGS) + "\n")
    check(read(n.dropin).endswith(want), "drop-in resets ExecStart to our binary with kubeadm's variables and the extra flags")
    tr = read(os.path.join(n.host, "etc/kubernetes/kubelet-rs.conf.d/50-kubelet-rs-tracing.conf"))
    check(f'tracing:\n  endpoint: "{TRACING}"\n  samplingRatePerMillion: 1000000\n' in tr
          and "kind: KubeletConfiguration" in tr, "tracing drop-in written (endpoint, sampling rate)")
    check(n.show("DropInPaths").split() == [os.path.join(n.units, "kubelet.service.d/10-kubeadm.conf"), n.dropin],
          "systemd loaded both drop-ins (10-kubeadm.conf, 90-kubelet-rs.conf)")
    check(n.show("ActiveState") == "active" and n.running_role() == "new", "systemd runs our kubelet as kubelet.service")
    last = n.starts()[-1]
    want_args = BASE_ARGS + ["--config-dir=/etc/kubernetes/kubelet-rs.conf.d"] + EXTRA_FLAGS
    check(last["role"] == "new" and last["argv"] == want_args,
          f"our kubelet got kubeadm's flags and ours: {' '.join(last['argv'])}")
    node = n.node()
    ann = node["metadata"]["annotations"]
    check(n.state() == "installed" and ann["kubelet-rs.io/version"] == "v1.34.0+kubelet-rs.0.1.0-test"
          and ann["kubelet-rs.io/sha256"] == sha(n.ours) and "installed at" in ann["kubelet-rs.io/message"],
          f"node marked: kubelet-rs.io/state=installed, {ann['kubelet-rs.io/message']!r}")
    check(lease()["spec"].get("holderIdentity", "") == "", "lock released")
    return took


def main():
    # A TERM (timeout, a killed run) still takes the nodes down (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("[chart-test] terminated"))
    os.makedirs(SCRATCH, exist_ok=True)
    write(os.path.join(SCRATCH, "token"), TOKEN + "\n", 0o600)
    write(os.path.join(SCRATCH, "new-kubelet"),
          read(os.path.join(HERE, "fake_kubelet.py")).replace("@ROLE@", "new"), 0o755)
    apilog = open(os.path.join(SCRATCH, "apiserver.log"), "w")
    PROCS.append(subprocess.Popen([sys.executable, os.path.join(HERE, "fake_apiserver.py"), str(API_PORT), TOKEN],
                                  stdout=apilog, stderr=subprocess.STDOUT))
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", API_PORT), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    api("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubelet-rs-control"}, "data": {"uninstall": "false"}})
    nodes = {name: Node(name) for name in NODES}
    try:
        for n in nodes.values():
            n.setup()
            n.old_sha = sha(n.old)
            n.unit_sha = sha(os.path.join(n.units, "kubelet.service"))
            n.kubeadm_sha = sha(os.path.join(n.units, "kubelet.service.d/10-kubeadm.conf"))
        a, b = nodes["a"], nodes["b"]

        log("== install, happy path (node a)")
        took = test_install(a)
        starts = len(a.starts())
        rc, out = a.installer("install", "install-again.log")
        check(rc == 0 and "already installed" in out and len(a.starts()) == starts,
              "a second run finds it installed and healthy: no restart")

        log("== uninstall (node a)")
        rc, out = a.installer("uninstall", "uninstall.log")
        check(rc == 0 and a.state() is None
              and not any(k.startswith("kubelet-rs.io/") for k in a.node()["metadata"].get("annotations", {})),
              "uninstall: exit 0, label and annotations removed")
        expect_clean(a, "uninstall")

        for mode, reason in (("no-healthz", "healthz"), ("not-ready", "not Ready")):
            log(f"== rollback: our kubelet {mode} (node a)")
            a.set_mode(mode)
            t0 = time.time()
            rc, out = a.installer("install", f"install-{mode}.log")
            took_rb = time.time() - t0
            check(rc == 1 and not os.path.exists(a.env()["READY_FILE"]),
                  f"install exits 1 and the pod stays unready ({took_rb:.1f}s, deadline {DEADLINE_S}s)")
            check(DEADLINE_S <= took_rb < DEADLINE_S + 30, "rolled back after the deadline, not before")
            check(any(s["role"] == "new" and s["mode"] == mode for s in a.starts()),
                  "our kubelet had been started by systemd before the rollback")
            msg = a.node()["metadata"]["annotations"]["kubelet-rs.io/message"]
            check(a.state() == "rolled-back" and reason in msg, f"node marked rolled-back: {msg!r}")
            expect_clean_rb = a.state() == "rolled-back"
            # A rolled-back node keeps its mark: only the host side is clean.
            check(expect_clean_rb and not os.path.exists(a.dropin) and not os.path.exists(a.ours),
                  "drop-in and binary removed")
            check(a.show("ActiveState") == "active" and a.running_role() == "old" and a.healthz(),
                  "systemd runs the node's own kubelet again (active, healthz ok)")
            check(sha(os.path.join(a.units, "kubelet.service.d/10-kubeadm.conf")) == a.kubeadm_sha,
                  "10-kubeadm.conf untouched")
            n_starts = len(a.starts())
            rc, out = a.installer("install", f"install-{mode}-again.log")
            check(rc == 1 and "rolled back on a before" in out and len(a.starts()) == n_starts,
                  "the same binary is not tried again on a rolled-back node")
            api("PATCH", "/api/v1/nodes/a", {"metadata": {"labels": {"kubelet-rs.io/state": None}}},
                "application/merge-patch+json")
        a.set_mode("ok")

        log("== lock: a live holder blocks until its lease expires (node a)")
        set_lease("busy-pod", 0, 6)
        t0 = time.time()
        took_lock = 0.0
        rc, out = a.installer("install", "install-lock-wait.log")
        waited = time.time() - t0
        check(rc == 0 and "waiting for the lock" in out and "took over the lock from busy-pod" in out,
              f"waited for busy-pod, then took the expired lock ({waited:.1f}s in all)")
        check(waited >= 6, "did not take the lock before the holder's lease ran out (6s)")
        a.installer("uninstall", "uninstall-2.log")

        log("== lock: a stale holder (crashed) is taken over at once (node a)")
        set_lease("crashed-pod", 120, 8)
        t0 = time.time()
        rc, out = a.installer("install", "install-lock-stale.log")
        took_lock = time.time() - t0
        check(rc == 0 and "took over the lock from crashed-pod" in out and "waiting for the lock" not in out,
              f"stale lease taken over without waiting ({took_lock:.1f}s)")
        a.installer("uninstall", "uninstall-3.log")

        log("== lock: nodes a and b installing at the same time, one after the other")
        events_before = len(api("GET", "/_test/events"))
        pa = a.installer("install", "install-concurrent.log", background=True)
        pb = b.installer("install", "install-concurrent.log", background=True)
        t0 = time.time()
        check(pa.wait(timeout=120) == 0 and pb.wait(timeout=120) == 0,
              f"both installs succeeded ({time.time() - t0:.1f}s)")
        events = api("GET", "/_test/events")[events_before:]
        intervals = {}
        holder = None
        for e in events:
            if e["type"] == "lease":
                if e["holder"] in ("pod-a", "pod-b") and holder != e["holder"]:
                    intervals[e["holder"]] = [e["t"], None]
                if e["holder"] == "" and holder in intervals:
                    intervals[holder][1] = e["t"]
                holder = e["holder"]
        check(all(v[1] is not None for v in intervals.values()) and len(intervals) == 2,
              "each installer took and released the lock once")
        (first, i1), (second, i2) = sorted(intervals.items(), key=lambda kv: kv[1][0])
        check(i1[1] <= i2[0], f"lock intervals disjoint: {first} {i1[1] - i1[0]:.1f}s, then {second} {i2[1] - i2[0]:.1f}s")
        for name, (s, e) in intervals.items():
            ours = [ev["t"] for ev in events if ev["type"] == "node-status" and ev["node"] == name[-1]
                    and ev["version"] == "v1.34.0"]
            check(ours and s <= min(ours) <= e,
                  f"node {name[-1]}'s new kubelet came up while {name} held the lock")
        for n in (a, b):
            check(n.state() == "installed" and n.running_role() == "new", f"node {n.name}: installed, systemd runs ours")

        log("== pre-delete hook: the DaemonSet's `run` pods undo their nodes when the Job asks")
        runners = [n.installer("run", "run.log", background=True) for n in (a, b)]
        time.sleep(3)
        check(all(p.poll() is None for p in runners) and all(os.path.exists(n.env()["READY_FILE"]) for n in (a, b)),
              "`run` pods found their nodes installed, are ready and keep running")
        t0 = time.time()
        job = subprocess.run(["busybox", "sh", INSTALLER, "wait-uninstalled"], text=True, capture_output=True,
                             env=a.env(WAIT_TIMEOUT_S="120", NODE_NAME=""))
        took_hook = time.time() - t0
        write(os.path.join(SCRATCH, "hook.log"), job.stdout + job.stderr)
        check(job.returncode == 0 and "every node is back on its own kubelet" in job.stderr,
              f"hook Job: flag set, returned once no node was marked ({took_hook:.1f}s)")
        cm = api("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/kubelet-rs-control")
        check(cm["data"]["uninstall"] == "true", "ConfigMap flag uninstall=true")
        for n in (a, b):
            check(n.state() is None, f"node {n.name}: mark removed")
            expect_clean(n, f"pre-delete, node {n.name}")
        check(all(p.poll() is None for p in runners), "`run` pods keep running (sleeping) after the undo")
        for p in runners:
            p.terminate()
            p.wait(timeout=10)

        log("== pre-delete hook: gives up when a marked node has no pod to undo it")
        api("PATCH", "/api/v1/nodes/b", {"metadata": {"labels": {"kubelet-rs.io/state": "installed"}}},
            "application/merge-patch+json")
        job = subprocess.run(["busybox", "sh", INSTALLER, "wait-uninstalled"], text=True, capture_output=True,
                             env=a.env(WAIT_TIMEOUT_S="3", NODE_NAME=""))
        check(job.returncode != 0 and "nodes still marked after 3s: b" in job.stderr,
              "hook Job fails (non-zero) naming the node still marked")
        log(f"PASS: {CHECKS[0]} checks; install {took:.1f}s, stale-lock install {took_lock:.1f}s, "
            f"pre-delete undo of 2 nodes {took_hook:.1f}s, rollback deadline {DEADLINE_S}s")
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        for n in nodes.values():
            n.teardown()
        remove_mount_points()
        if os.environ.get("KEEP_SCRATCH") != "1":
            shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
