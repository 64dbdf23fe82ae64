#!/usr/bin/env python3
"""Usage: oci_node.py --root DIR --out FILE.tar --name REF [--name REF ...]
                   [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--stop-signal SIG]
                   [--label K=V ...] [--arch amd64]

Writes the kind node image: a one-layer OCI image layout tar from the folder DIR, like
hack/testbed/oci_image.py (whose helpers it uses, so both write the same layout) with what a
whole distribution root needs on top: each entry keeps its owner (uid, gid), device nodes and
fifos are kept, hard links stay links, and the layer is streamed through files instead of
memory (the root is hundreds of MB). The config carries StopSignal and labels. Output depends
only on the folder and the arguments (sorted entries, mtime 0, gzip without name or time).
Prints the manifest digest.

oci_image.py itself is left as it is: its text is part of the cache key of every test image
(hack/testbed/image_lib.sh, krs_image_recipe), so changing it would rebuild them all.
"""

import argparse
import gzip
import hashlib
import json
import os
import shutil
import stat
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../hack/testbed"))
import oci_image  # noqa: E402  (walk_sorted, add_file, add_dir, canonical, json_list, media types)

CHUNK = 1 << 20


def entry(root, rel, st, links):
    info = tarfile.TarInfo(rel)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = stat.S_IMODE(st.st_mode)
    path = os.path.join(root, rel)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    elif stat.S_ISREG(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in links:
            info.type = tarfile.LNKTYPE
            info.linkname = links[key]
        else:
            if st.st_nlink > 1:
                links[key] = rel
            info.size = st.st_size
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    else:
        sys.exit(f"oci_node.py: {path}: sockets cannot go in an image")
    return info


def write_layer(root, tar_path):
    links = {}
    with open(tar_path, "wb") as out, tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel in oci_image.walk_sorted(root):
            path = os.path.join(root, rel)
            st = os.lstat(path)
            info = entry(root, rel, st, links)
            if info.type == tarfile.REGTYPE:
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


def hash_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def gzip_file(src, dst):
    with open(src, "rb") as fin, open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            shutil.copyfileobj(fin, gz, CHUNK)


def add_blob_file(tar, path, digest):
    info = tarfile.TarInfo("blobs/sha256/" + digest.split(":", 1)[1])
    info.size = os.path.getsize(path)
    info.mode = 0o644
    oci_image.normalize(info)
    with open(path, "rb") as f:
        tar.addfile(info, f)


def pairs(items, flag):
    out = {}
    for item in items:
        if "=" not in item:
            sys.exit(f"oci_node.py: {flag} wants K=V, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def main():
    p = argparse.ArgumentParser(description="Write a distribution root as a one-layer OCI image tar.")
    p.add_argument("--root", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--name", action="append", required=True)
    p.add_argument("--entrypoint")
    p.add_argument("--cmd")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--stop-signal")
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--arch", default="amd64")
    args = p.parse_args()
    if not os.path.isdir(args.root):
        sys.exit(f"oci_node.py: {args.root} is not a folder")

    work = tempfile.mkdtemp(prefix="oci-node-", dir=os.path.dirname(os.path.abspath(args.out)))
    try:
        layer, layer_gz = os.path.join(work, "layer.tar"), os.path.join(work, "layer.tar.gz")
        write_layer(args.root, layer)
        diff_id = hash_file(layer)
        gzip_file(layer, layer_gz)
        os.unlink(layer)
        layer_digest = hash_file(layer_gz)

        env = list(args.env)
        if not any(e.startswith("PATH=") for e in env):
            env.insert(0, oci_image.DEFAULT_PATH)
        run_config = {"Env": env, "WorkingDir": "/"}
        for key, flag in (("Entrypoint", "--entrypoint"), ("Cmd", "--cmd")):
            value = oci_image.json_list(getattr(args, flag[2:]), flag)
            if value is not None:
                run_config[key] = value
        if args.stop_signal:
            run_config["StopSignal"] = args.stop_signal
        if args.label:
            run_config["Labels"] = pairs(args.label, "--label")
        config = oci_image.canonical(
            {
                "created": oci_image.EPOCH,
                "architecture": args.arch,
                "os": "linux",
                "config": run_config,
                "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                "history": [{"created": oci_image.EPOCH, "created_by": "kubelet-rs images/node/build.sh"}],
            }
        )
        tmp = args.out + ".tmp"
        with open(tmp, "wb") as out, tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
            oci_image.add_file(tar, "oci-layout", oci_image.canonical({"imageLayoutVersion": "1.0.0"}))
            oci_image.add_dir(tar, "blobs")
            oci_image.add_dir(tar, "blobs/sha256")
            config_digest = oci_image.add_blob(tar, config)
            add_blob_file(tar, layer_gz, layer_digest)
            manifest = oci_image.canonical(
                {
                    "schemaVersion": 2,
                    "mediaType": oci_image.MT_MANIFEST,
                    "config": {"mediaType": oci_image.MT_CONFIG, "digest": config_digest, "size": len(config)},
                    "layers": [
                        {
                            "mediaType": oci_image.MT_LAYER,
                            "digest": layer_digest,
                            "size": os.path.getsize(layer_gz),
                        }
                    ],
                }
            )
            manifest_digest = oci_image.add_blob(tar, manifest)
            index = {
                "schemaVersion": 2,
                "mediaType": oci_image.MT_INDEX,
                "manifests": [
                    {
                        "mediaType": oci_image.MT_MANIFEST,
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": args.arch, "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name,
                        },
                    }
                    for name in args.name
                ],
            }
            oci_image.add_file(tar, "index.json", oci_image.canonical(index))
        os.replace(tmp, args.out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(manifest_digest)


if __name__ == "__main__":
    main()
