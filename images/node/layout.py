#!/usr/bin/env python3
"""Usage: layout.py TAR

Checks that TAR (images/node/build.sh's output) is a valid OCI image layout and a kind node
image, reading it as a stream (nothing is unpacked):
  - oci-layout says 1.0.0; index.json, each manifest, config and layer are blobs whose sha256
    is their name and whose size and media type are what points at them;
  - each layer's diff_id in the config is the sha256 of its uncompressed content;
  - the config has kind's entrypoint (/usr/local/bin/entrypoint /sbin/init), stop signal
    SIGRTMIN+3 and container=docker;
  - the layer holds what a kind node needs (REQUIRED below), /kind/version names a version.
Prints "name", "digest", "layer", "summary", "config" and "holds" lines on success; prints
the problems and exits 1 otherwise.
"""

import gzip
import hashlib
import json
import sys
import tarfile

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
ENTRYPOINT = ["/usr/local/bin/entrypoint", "/sbin/init"]
STOP_SIGNAL = "SIGRTMIN+3"

# path in the layer -> what it must be: "x" executable file, "f" file, "d" folder, "l" symlink
REQUIRED = {
    "usr/bin/kubelet": "x",
    "usr/bin/kubeadm": "x",
    "usr/bin/kubectl": "x",
    "usr/bin/containerd": "x",
    "usr/bin/containerd-shim-runc-v2": "x",
    "usr/bin/ctr": "x",
    "usr/sbin/runc": "x",
    "usr/lib/cni/bridge": "x",
    "usr/lib/cni/host-local": "x",
    "usr/lib/cni/loopback": "x",
    "usr/lib/cni/portmap": "x",
    "usr/lib/cni/ptp": "x",
    "usr/lib/systemd/systemd": "x",
    "usr/sbin/init": "l",
    "sbin": "l",
    "usr/local/bin/entrypoint": "x",
    "kind/version": "f",
    "kind/bin/create-kubelet-cgroup-v2.sh": "x",
    "etc/systemd/system/kubelet.service": "f",
    "etc/systemd/system/kubelet.service.d/10-kubeadm.conf": "f",
    "etc/systemd/system/kubelet.service.d/11-kind.conf": "f",
    "etc/systemd/system/kubelet.slice": "f",
    "etc/systemd/system/containerd.service": "f",
    "etc/systemd/system/kubelet-rs-cgroups.service": "f",
    "etc/systemd/system/multi-user.target.wants/kubelet-rs-cgroups.service": "l",
    "etc/systemd/system/multi-user.target.wants/kubelet.service": "l",
    "etc/systemd/system/multi-user.target.wants/containerd.service": "l",
    "etc/containerd/config.toml": "f",
    "etc/default/kubelet": "f",
    "etc/kubernetes/manifests": "d",
    "var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db": "f",
    "var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots": "d",
    "usr/sbin/iptables": "l",
    "usr/sbin/conntrack": "x",
    "usr/bin/dbus-daemon": "x",
}


class Hashing:
    """A reader that hashes what passes through it."""

    def __init__(self, f):
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def read(self, size=-1):
        data = self.f.read(size)
        self.h.update(data)
        self.n += len(data)
        return data


def fail(problems):
    for p in problems:
        print(f"layout.py: {p}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.splitlines()[0])
    path = sys.argv[1]
    problems = []
    with tarfile.open(path) as tar:
        members = {m.name: m for m in tar.getmembers()}

        def blob(desc, media_type, what):
            d = desc.get("digest", "")
            name = "blobs/" + d.replace(":", "/", 1)
            m = members.get(name)
            if m is None:
                problems.append(f"{what}: blob {d} missing")
                return None
            if desc.get("size") != m.size:
                problems.append(f"{what}: size {desc.get('size')} but blob has {m.size}")
            if desc.get("mediaType") != media_type:
                problems.append(f"{what}: media type {desc.get('mediaType')}, expected {media_type}")
            return name

        def read_verified(name, what):
            data = tar.extractfile(members[name]).read()
            if "sha256:" + hashlib.sha256(data).hexdigest() != name.replace("blobs/", "").replace("/", ":", 1):
                problems.append(f"{what}: content does not match its digest")
            return data

        if "oci-layout" not in members or "index.json" not in members:
            fail(["oci-layout or index.json missing: not an OCI image layout"])
        layout = json.loads(tar.extractfile(members["oci-layout"]).read())
        if layout.get("imageLayoutVersion") != "1.0.0":
            problems.append(f"oci-layout: imageLayoutVersion {layout.get('imageLayoutVersion')}")
        index = json.loads(tar.extractfile(members["index.json"]).read())
        if index.get("schemaVersion") != 2 or not index.get("manifests"):
            fail(problems + ["index.json: schemaVersion 2 with manifests expected"])
        desc = index["manifests"][0]
        names = [m.get("annotations", {}).get("io.containerd.image.name") for m in index["manifests"]]
        mname = blob(desc, MT_MANIFEST, "manifest")
        if mname is None:
            fail(problems)
        manifest = json.loads(read_verified(mname, "manifest"))
        cname = blob(manifest["config"], MT_CONFIG, "config")
        if cname is None:
            fail(problems)
        config = json.loads(read_verified(cname, "config"))
        run = config.get("config", {})
        if run.get("Entrypoint") != ENTRYPOINT:
            problems.append(f"config: Entrypoint {run.get('Entrypoint')}, kind expects {ENTRYPOINT}")
        if run.get("StopSignal") != STOP_SIGNAL:
            problems.append(f"config: StopSignal {run.get('StopSignal')}, expected {STOP_SIGNAL}")
        if "container=docker" not in run.get("Env", []):
            problems.append("config: Env lacks container=docker")
        diff_ids = config.get("rootfs", {}).get("diff_ids", [])
        if len(diff_ids) != len(manifest["layers"]):
            problems.append(f"config: {len(diff_ids)} diff_ids for {len(manifest['layers'])} layers")

        found, entries, version, unpacked, packed = {}, 0, None, 0, 0
        layer_names = []
        for i, ldesc in enumerate(manifest["layers"]):
            lname = blob(ldesc, MT_LAYER_GZ, f"layer {i}")
            if lname is None:
                continue
            layer_names.append(lname)
            packed += members[lname].size
            raw = Hashing(tar.extractfile(members[lname]))
            plain = Hashing(gzip.GzipFile(fileobj=raw))
            with tarfile.open(fileobj=plain, mode="r|") as layer:
                for m in layer:
                    entries += 1
                    n = m.name.lstrip("./")
                    if n in REQUIRED:
                        kind = "d" if m.isdir() else "l" if m.issym() else "f" if m.isfile() else "?"
                        if kind == "f" and m.mode & 0o111:
                            kind = "x" if REQUIRED[n] == "x" else "f"
                        found[n] = kind
                    if n == "kind/version":
                        version = layer.extractfile(m).read().decode().strip()
            while plain.read(1 << 20):
                pass
            while raw.read(1 << 20):
                pass
            unpacked += plain.n
            if "sha256:" + raw.h.hexdigest() != ldesc["digest"]:
                problems.append(f"layer {i}: content does not match its digest")
            if i < len(diff_ids) and "sha256:" + plain.h.hexdigest() != diff_ids[i]:
                problems.append(f"layer {i}: diff_id does not match its uncompressed content")
        for n, kind in REQUIRED.items():
            if found.get(n) != kind:
                problems.append(f"layer: /{n} missing or not {kind!r} (found {found.get(n)!r})")
        if not version or not version.startswith("v"):
            problems.append(f"layer: /kind/version is {version!r}")
        if problems:
            fail(problems)

    mb = 1 << 20
    print(f"name {names[0]}")
    print(f"digest {desc['digest']}")
    print(f"layer {layer_names[0]}")
    print(
        f"summary {len(members)} tar entries, {len(manifest['layers'])} layer(s), digests, sizes and "
        f"diff_ids match; layer {packed / mb:.0f} MiB gzip, {unpacked / mb:.0f} MiB unpacked, "
        f"{entries} files"
    )
    print(
        f"config {config['os']}/{config['architecture']}, Entrypoint {' '.join(run['Entrypoint'])}, "
        f"StopSignal {run['StopSignal']}, container=docker"
    )
    print(f"holds {len(REQUIRED)} required paths (kubelet, kubeadm, kubectl, containerd, runc, CNI, "
          f"units, drop-ins, preloaded image store), /kind/version {version}")


if __name__ == "__main__":
    main()
