#!/usr/bin/env python3
"""Usage: oci_image.py --root DIR --out FILE.tar --name REF [--name REF ...]
                    [--entrypoint JSON] [--cmd JSON] [--env K=V ...] [--workdir DIR]
                    [--user USER] [--arch amd64]

Writes a one-layer OCI image layout, as a tar that `ctr images import` reads, from the folder
DIR. No docker and no registry involved. The output depends only on the folder's content and
the arguments: entries sorted, owner root, mtime 0, gzip without name or time. Every REF is
recorded in index.json (annotations org.opencontainers.image.ref.name and
io.containerd.image.name), so the import creates each name. Prints the manifest digest.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile

EPOCH = "1970-01-01T00:00:00Z"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_INDEX = "application/vnd.oci.image.index.v1+json"


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def normalize(info):
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def walk_sorted(root):
    """Relative paths of everything under root, parents before children, in byte order."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + sorted(filenames):
            out.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(out, key=lambda p: p.encode())


def layer_tar(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for rel in walk_sorted(root):
            path = os.path.join(root, rel)
            st = os.lstat(path)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(st.st_mode):
                info = tarfile.TarInfo(rel)
                info.type = tarfile.DIRTYPE
                info.mode = mode
                tar.addfile(normalize(info))
            elif stat.S_ISLNK(st.st_mode):
                info = tarfile.TarInfo(rel)
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                info.mode = 0o777
                tar.addfile(normalize(info))
            elif stat.S_ISREG(st.st_mode):
                info = tarfile.TarInfo(rel)
                info.size = st.st_size
                info.mode = mode
                with open(path, "rb") as f:
                    tar.addfile(normalize(info), f)
            else:
                sys.exit(f"oci_image.py: {path}: only files, folders and symlinks are supported")
    return buf.getvalue()


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buf.getvalue()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def add_blob(tar, data):
    name = "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    add_file(tar, name, data)
    return digest(data)


def add_file(tar, name, data):
    info = normalize(tarfile.TarInfo(name))
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar, name):
    info = normalize(tarfile.TarInfo(name))
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def json_list(text, flag):
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        sys.exit(f"oci_image.py: {flag} must be a JSON list of strings")
    return value


def main():
    parser = argparse.ArgumentParser(description="Build an OCI image tar from a folder.")
    parser.add_argument("--root", required=True, help="folder that becomes the image's /")
    parser.add_argument("--out", required=True, help="tar file to write")
    parser.add_argument("--name", action="append", required=True, help="full image reference")
    parser.add_argument("--entrypoint", help='JSON list, e.g. ["/pause"]')
    parser.add_argument("--cmd", help='JSON list, e.g. ["sh"]')
    parser.add_argument("--env", action="append", default=[], help="K=V (PATH has a default)")
    parser.add_argument("--workdir", default="/")
    parser.add_argument("--user", help="the image's user, e.g. 1234 or 1234:1234 (default: root)")
    parser.add_argument("--arch", default="amd64")
    args = parser.parse_args()

    if not os.path.isdir(args.root):
        sys.exit(f"oci_image.py: {args.root} is not a folder")

    layer = layer_tar(args.root)
    layer_gz = gzip_bytes(layer)

    env = list(args.env)
    if not any(e.startswith("PATH=") for e in env):
        env.insert(0, DEFAULT_PATH)
    run_config = {"Env": env, "WorkingDir": args.workdir}
    entrypoint = json_list(args.entrypoint, "--entrypoint")
    cmd = json_list(args.cmd, "--cmd")
    if entrypoint is not None:
        run_config["Entrypoint"] = entrypoint
    if cmd is not None:
        run_config["Cmd"] = cmd
    if args.user is not None:
        run_config["User"] = args.user

    config = canonical(
        {
            "created": EPOCH,
            "architecture": args.arch,
            "os": "linux",
            "config": run_config,
            "rootfs": {"type": "layers", "diff_ids": [digest(layer)]},
            "history": [{"created": EPOCH, "created_by": "kubelet-rs hack/testbed/oci_image.py"}],
        }
    )

    tmp = args.out + ".tmp"
    with open(tmp, "wb") as out, tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        add_file(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
        add_dir(tar, "blobs")
        add_dir(tar, "blobs/sha256")
        config_digest = add_blob(tar, config)
        layer_digest = add_blob(tar, layer_gz)
        manifest = canonical(
            {
                "schemaVersion": 2,
                "mediaType": MT_MANIFEST,
                "config": {"mediaType": MT_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": len(layer_gz)}],
            }
        )
        manifest_digest = add_blob(tar, manifest)
        index = {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                {
                    "mediaType": MT_MANIFEST,
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
        add_file(tar, "index.json", canonical(index))
    os.replace(tmp, args.out)
    print(manifest_digest)


if __name__ == "__main__":
    main()
