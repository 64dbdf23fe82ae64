#!/usr/bin/env python3
"""Usage: chart_test.py CHART_DIR   (started by charts/kubelet-rs/test/run.sh, in its venv)

Lints and renders the kubelet-rs chart with PyPI's helm-python-sdk (Helm 4's Go SDK through
libhelm_c, no helm binary), with the default values and with non-default ones, and checks the
rendered objects' key facts. Also checks that values the chart refuses (a flag with a blank, no
nodeSelector) make rendering fail. Exits non-zero on the first failed check.
"""

import sys

import helm_python as helm
import yaml

CHART = sys.argv[1]
CHECKS = [0]


def check(cond, what):
    if not cond:
        raise SystemExit(f"[chart-test] FAIL: {what}")
    CHECKS[0] += 1
    print(f"[chart-test] ok: {what}", flush=True)


def render(values, name="krs", namespace="kube-system"):
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=name, namespace=namespace, is_install=True)
    objs = {}
    for path, text in out.items():
        if not path.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


def env_of(container):
    out = {}
    for e in container["env"]:
        out[e["name"]] = e.get("value", e.get("valueFrom"))
    return out


def lint(values, what):
    report = helm.lint(CHART, values, strict=True, namespace="kube-system")
    msgs = [f"[{m['severity']}] {m['path']}: {m['error']}" for m in report["messages"]]
    worst = max([m["severity"] for m in report["messages"]], default=0)
    check(report["total_charts_linted"] == 1 and worst <= 1 and not report.get("errors"),
          f"helm lint --strict ({what}): {len(msgs)} message(s), none a warning or error"
          + ("".join(f"\n    {m}" for m in msgs)))


def main():
    print(f"[chart-test] helm-c {helm.helm_c_version()}, Helm SDK {helm.helm_sdk_version()}")
    with helm.Chart.load(CHART) as chart:
        check(chart.name == "kubelet-rs" and chart.version == "0.1.0",
              f"chart loads: {chart.name} {chart.version}, appVersion {chart.metadata['appVersion']}")
    lint(None, "default values")
    custom = {
        "image": {"repository": "registry.example/kubelet-rs-installer", "tag": "dev", "pullPolicy": "Always"},
        # Helm merges maps: the default label is removed with null.
        "nodeSelector": {"pool": "rust", "kubelet-rs.io/install": None},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "rust", "effect": "NoSchedule"}],
        "extraFlags": ["--v=4", "--node-labels=runtime=kubelet-rs"],
        "tracing": {"endpoint": "otel.observability:4317", "samplingRatePerMillion": 10000},
        "rollbackDeadlineSeconds": 300,
        "lockLeaseDurationSeconds": 90,
        "uninstallTimeoutSeconds": 600,
    }
    lint(custom, "non-default values")

    # ---- default values
    objs = render(None)
    kinds = sorted(f"{k}/{n}" for k, n in objs)
    check(kinds == ["ClusterRole/krs-kubelet-rs", "ClusterRoleBinding/krs-kubelet-rs", "ConfigMap/krs-kubelet-rs-control",
                    "DaemonSet/krs-kubelet-rs", "Job/krs-kubelet-rs-uninstall", "Lease/krs-kubelet-rs-lock",
                    "Role/krs-kubelet-rs", "RoleBinding/krs-kubelet-rs", "ServiceAccount/krs-kubelet-rs"],
          f"default render: {len(kinds)} objects: {', '.join(kinds)}")
    ds = objs[("DaemonSet", "krs-kubelet-rs")]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = env_of(c)
    check(pod["nodeSelector"] == {"kubelet-rs.io/install": "true"}, "opt-in: nodeSelector kubelet-rs.io/install=true")
    check(pod["hostPID"] is True and pod["hostNetwork"] is True and c["securityContext"]["privileged"] is True,
          "pod is privileged with hostPID and hostNetwork")
    vm = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    check(vm == {"host": "/host"} and vols["host"]["hostPath"]["path"] == "/" and env["HOST_ROOT"] == "/host",
          "host / mounted at /host (HOST_ROOT=/host)")
    check(c["image"] == "localhost/kubelet-rs-installer:0.1.0" and c["imagePullPolicy"] == "IfNotPresent",
          f"image {c['image']} ({c['imagePullPolicy']})")
    check(c["command"] == ["/bin/sh", "/opt/kubelet-rs/installer.sh", "run"], "runs installer.sh run")
    check(pod["tolerations"] == [{"operator": "Exists"}], "tolerates every taint by default")
    check(env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
          and env["HOLDER"] == {"fieldRef": {"fieldPath": "metadata.name"}},
          "node name and lock holder from the Downward API")
    check(env["EXTRA_FLAGS"] == "" and env["TRACING_ENDPOINT"] == "" and env["TRACING_SAMPLING_RATE"] == ""
          and env["ROLLBACK_DEADLINE_S"] == "180" and env["LEASE_DURATION_S"] == "120"
          and env["HEALTHZ_URL"] == "http://127.0.0.1:10248/healthz",
          "defaults: no extra flags, no tracing, rollback deadline 180s, lease 120s, healthz 127.0.0.1:10248")
    check(env["LEASE_NAME"] == "krs-kubelet-rs-lock" and env["CONFIGMAP_NAME"] == "krs-kubelet-rs-control",
          "the installer is given the chart's Lease and ConfigMap")
    check(c["readinessProbe"]["exec"]["command"] == ["test", "-f", "/tmp/kubelet-rs-ready"],
          "readiness: the node runs kubelet-rs")
    check(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1, "rolling update, one pod at a time")
    check(pod["serviceAccountName"] == "krs-kubelet-rs", "pods use the chart's service account")
    lease = objs[("Lease", "krs-kubelet-rs-lock")]
    check(lease["spec"] == {"leaseDurationSeconds": 120} and lease["metadata"]["namespace"] == "kube-system",
          "Lease krs-kubelet-rs-lock (120s), unheld")
    cm = objs[("ConfigMap", "krs-kubelet-rs-control")]
    check(cm["data"] == {"uninstall": "false"}, "ConfigMap flag uninstall=false")
    cr = objs[("ClusterRole", "krs-kubelet-rs")]["rules"]
    check(cr == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}],
          "ClusterRole: nodes get/list/patch, nothing else")
    role = objs[("Role", "krs-kubelet-rs")]["rules"]
    check({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["krs-kubelet-rs-lock"],
           "verbs": ["get", "update"]} in role
          and {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["krs-kubelet-rs-control"],
               "verbs": ["get", "patch"]} in role,
          "Role: its Lease get/update, its ConfigMap get/patch (by name)")
    for b in ("ClusterRoleBinding", "RoleBinding"):
        s = objs[(b, "krs-kubelet-rs")]["subjects"]
        check(s == [{"kind": "ServiceAccount", "name": "krs-kubelet-rs", "namespace": "kube-system"}],
              f"{b} binds the service account")
    job = objs[("Job", "krs-kubelet-rs-uninstall")]
    jc = job["spec"]["template"]["spec"]["containers"][0]
    check(job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
          and "hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"],
          "Job is a pre-delete hook, deleted once it succeeded")
    check(jc["command"][-1] == "wait-uninstalled" and env_of(jc)["WAIT_TIMEOUT_S"] == "1800"
          and job["spec"]["activeDeadlineSeconds"] == 1860 and job["spec"]["backoffLimit"] == 0,
          "Job runs wait-uninstalled (1800s, deadline 1860s, no retries)")
    check(jc["securityContext"]["runAsNonRoot"] is True and "privileged" not in jc["securityContext"],
          "Job runs unprivileged")

    # ---- non-default values
    objs = render(custom, name="kubelet-rs", namespace="node-agents")
    ds = objs[("DaemonSet", "kubelet-rs")]
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = env_of(c)
    check(c["image"] == "registry.example/kubelet-rs-installer:dev" and c["imagePullPolicy"] == "Always",
          f"custom image {c['image']} (Always); release named after the chart keeps names short")
    check(pod["nodeSelector"] == {"pool": "rust"} and pod["tolerations"] == custom["tolerations"],
          "custom nodeSelector and tolerations")
    check(env["EXTRA_FLAGS"] == "--v=4 --node-labels=runtime=kubelet-rs", f"extra flags: {env['EXTRA_FLAGS']!r}")
    check(env["TRACING_ENDPOINT"] == "otel.observability:4317" and env["TRACING_SAMPLING_RATE"] == "10000",
          "tracing endpoint and sampling rate passed")
    check(env["ROLLBACK_DEADLINE_S"] == "300" and env["LEASE_DURATION_S"] == "90",
          "rollback deadline 300s, lease 90s")
    check(objs[("Lease", "kubelet-rs-lock")]["metadata"]["namespace"] == "node-agents"
          and objs[("Job", "kubelet-rs-uninstall")]["spec"]["activeDeadlineSeconds"] == 660,
          "objects in the release namespace; Job deadline follows uninstallTimeoutSeconds")

    # ---- values the chart refuses
    for bad, what in (({"extraFlags": ["--node-labels=a=b c=d"]}, "an extra flag holding a blank"),
                      ({"extraFlags": ["--v=$(id)"]}, "an extra flag holding $"),
                      ({"nodeSelector": None}, "no nodeSelector")):
        try:
            render(bad)
        except helm.HelmError as e:
            check(True, f"refused: {what} ({str(e).splitlines()[-1][:110]})")
        else:
            check(False, f"refused: {what}")
    print(f"[chart-test] PASS: {CHECKS[0]} chart checks")


if __name__ == "__main__":
    main()
