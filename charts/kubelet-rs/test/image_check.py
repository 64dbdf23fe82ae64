#!/usr/bin/env python3
"""Usage: image_check.py IMAGE.tar KUBELET SCRATCH_DIR   (as root; started by run.sh)

Checks the installer image tarball (installer/build-image.sh): a valid OCI layout (index.json,
manifest, config and layer blobs whose sha256 and sizes match their descriptors, the name the
chart's values use), then unpacks its layer into SCRATCH_DIR and runs, chrooted there, what the
installer needs: busybox sh (parses installer.sh), nsenter, sha256sum, curl and jq (their shared
objects are in the image), and the kubelet, whose --version must equal KUBELET's. Exits
non-zero on the first failed check.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile

TAR, KUBELET, SCRATCH = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = [0]


def check(cond, what):
    if not cond:
        raise SystemExit(f"[chart-test] FAIL: {what}")
    CHECKS[0] += 1
    print(f"[chart-test] ok: {what}", flush=True)


def main():
    with tarfile.open(TAR) as t:
        def blob(desc):
            data = t.extractfile("blobs/sha256/" + desc["digest"].split(":")[1]).read()
            check(hashlib.sha256(data).hexdigest() == desc["digest"].split(":")[1] and len(data) == desc["size"],
                  f"blob {desc['mediaType']} {desc['digest'][:19]}: digest and size ({len(data)}) match")
            return data

        layout = json.load(t.extractfile("oci-layout"))
        index = json.load(t.extractfile("index.json"))
        check(layout["imageLayoutVersion"] == "1.0.0" and len(index["manifests"]) == 1, "OCI layout 1.0.0, one manifest")
        desc = index["manifests"][0]
        names = desc.get("annotations", {})
        check(names.get("io.containerd.image.name") == "localhost/kubelet-rs-installer:0.1.0",
              "named localhost/kubelet-rs-installer:0.1.0 (the chart's default image)")
        manifest = json.loads(blob(desc))
        config = json.loads(blob(manifest["config"]))
        check(config["config"]["Entrypoint"] == ["/bin/sh", "/opt/kubelet-rs/installer.sh"]
              and config["architecture"] in ("amd64", "arm64"),
              f"config: entrypoint installer.sh, {config['os']}/{config['architecture']}")
        layers = manifest["layers"]
        check(len(layers) == 1, f"one layer, {layers[0]['size'] / 1e6:.1f} MB compressed")
        data = blob(layers[0])
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    layer = os.path.join(SCRATCH, "..", "layer.tar.gz")
    with open(layer, "wb") as f:
        f.write(data)
    with tarfile.open(layer) as lt:
        lt.extractall(SCRATCH)
    os.unlink(layer)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(SCRATCH) for f in fs
               if not os.path.islink(os.path.join(d, f)))
    print(f"[chart-test] image root: {size / 1e6:.1f} MB unpacked")
    with open(os.path.join(SCRATCH, "opt/kubelet-rs/installer.sh"), "rb") as a, \
            open(os.path.join(HERE, "../installer/installer.sh"), "rb") as b:
        check(a.read() == b.read(), "the image's installer.sh is the repository's")

    chroot = shutil.which("chroot") or "/usr/sbin/chroot"

    def run(*cmd):
        return subprocess.run([chroot, SCRATCH, *cmd], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})

    want = subprocess.run([KUBELET, "--version"], capture_output=True, text=True).stdout.strip()
    got = run("/opt/kubelet-rs/kubelet", "--version")
    check(got.returncode == 0 and got.stdout.strip() == want, f"in the image: kubelet --version = {got.stdout.strip()!r}")
    r = run("/bin/sh", "-n", "/opt/kubelet-rs/installer.sh")
    check(r.returncode == 0, "in the image: busybox sh parses installer.sh")
    r = run("/bin/sh", "/opt/kubelet-rs/installer.sh")
    check(r.returncode == 2 and "Usage: installer.sh" in r.stderr, "in the image: installer.sh runs (prints its usage)")
    for cmd, expect in ((["curl", "--version"], "curl "), (["jq", "--version"], "jq-"),
                        (["nsenter", "--help"], "nsenter"), (["sha256sum", "/opt/kubelet-rs/installer.sh"], "installer.sh"),
                        (["mktemp", "-d"], "/tmp/")):
        r = run(*cmd)
        out = (r.stdout + r.stderr).strip()
        check(expect in out and "not found" not in out and "error while loading" not in out,
              f"in the image: {' '.join(cmd)} -> {out.splitlines()[0][:60]!r}")
    print(f"[chart-test] PASS: {CHECKS[0]} image checks")


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
