"""A CSI driver for benchmarks, served by grpcio (grpc C-core) as a process of its own, so that
either kubelet can use it: the upstream kubelet's grpc-go v1.20 client names a unix socket's path
as the HTTP/2 authority, which the Rust stack of the tests' own driver (tests/common/csi_driver.rs)
refuses. Identity and Node services on one socket, the Registration service (as CSI's
node-driver-registrar serves it) on a second one in the kubelet's plugins_registry. Volumes are
folders under DIR/backing/<handle>, bind-mounted on the staging path and from there on each
target path. Runs until SIGTERM or SIGINT, then takes its sockets away.

Usage: csi_driver.py <repo-root> --name NAME --dir DIR --registry DIR
"""

import argparse
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import threading

import grpc


def stubs(repo_root, out_dir):
    """Generates the Python stubs from the project's own proto files."""
    for folder, name in (("csi/v1", "csi.proto"), ("pluginregistration/v1", "api.proto")):
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", "-I", f"{repo_root}/proto/{folder}",
             f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", name],
            check=True,
        )
    sys.path.insert(0, out_dir)
    import api_pb2
    import api_pb2_grpc
    import csi_pb2
    import csi_pb2_grpc
    return csi_pb2, csi_pb2_grpc, api_pb2, api_pb2_grpc


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split(" ")[4] == path for line in f)


def bind(source, target, read_only=False):
    os.makedirs(target, exist_ok=True)
    if mounted(target):
        return
    subprocess.run(["mount", "--bind", source, target], check=True, timeout=30)
    if read_only:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True, timeout=30)


def unmount(target):
    if mounted(target):
        subprocess.run(["umount", target], check=True, timeout=30)


def serve(args, csi, csi_grpc, reg, reg_grpc):
    backing = os.path.join(args.dir, "backing")
    # Short names: a unix socket's path has at most 107 characters.
    endpoint = os.path.join(args.dir, "csi.sock")
    registration = os.path.join(args.registry, f"{args.name.split('.')[0]}-reg.sock")

    def failing(method):
        def call(self, request, context):
            try:
                return method(self, request)
            except (OSError, subprocess.SubprocessError) as err:
                context.abort(grpc.StatusCode.INTERNAL, str(err))
        return call

    class Identity(csi_grpc.IdentityServicer):
        def GetPluginInfo(self, request, context):
            return csi.GetPluginInfoResponse(name=args.name, vendor_version="0.1.0")

    class Node(csi_grpc.NodeServicer):
        def NodeGetInfo(self, request, context):
            return csi.NodeGetInfoResponse(node_id=os.uname().nodename)

        def NodeGetCapabilities(self, request, context):
            stage = csi.NodeServiceCapability(rpc=csi.NodeServiceCapability.RPC(
                type=csi.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME))
            return csi.NodeGetCapabilitiesResponse(capabilities=[stage])

        @failing
        def NodeStageVolume(self, request):
            source = os.path.join(backing, request.volume_id)
            os.makedirs(source, exist_ok=True)
            bind(source, request.staging_target_path)
            return csi.NodeStageVolumeResponse()

        @failing
        def NodeUnstageVolume(self, request):
            unmount(request.staging_target_path)
            return csi.NodeUnstageVolumeResponse()

        @failing
        def NodePublishVolume(self, request):
            source = request.staging_target_path or os.path.join(backing, request.volume_id)
            os.makedirs(source, exist_ok=True)
            bind(source, request.target_path, request.readonly)
            return csi.NodePublishVolumeResponse()

        @failing
        def NodeUnpublishVolume(self, request):
            unmount(request.target_path)
            if os.path.isdir(request.target_path):
                os.rmdir(request.target_path)
            return csi.NodeUnpublishVolumeResponse()

    class Registration(reg_grpc.RegistrationServicer):
        def GetInfo(self, request, context):
            return reg.PluginInfo(type="CSIPlugin", name=args.name, endpoint=endpoint,
                                  supported_versions=["1.0.0"])

        def NotifyRegistrationStatus(self, request, context):
            if not request.plugin_registered:
                print(f"csi_driver: registration refused: {request.error}", file=sys.stderr)
            return reg.RegistrationStatusResponse()

    os.makedirs(args.dir, exist_ok=True)
    os.makedirs(args.registry, exist_ok=True)
    servers = []
    for path, add in ((endpoint, lambda s: (csi_grpc.add_IdentityServicer_to_server(Identity(), s),
                                            csi_grpc.add_NodeServicer_to_server(Node(), s))),
                      (registration, lambda s: reg_grpc.add_RegistrationServicer_to_server(
                          Registration(), s))):
        if os.path.exists(path):
            os.unlink(path)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
        add(server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        servers.append((server, path))
    print(f"csi_driver: {args.name} on {endpoint}, registration {registration}", file=sys.stderr,
          flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    for server, path in reversed(servers):
        server.stop(grace=2).wait()
        if os.path.exists(path):
            os.unlink(path)


def main():
    repo_root = sys.argv[1]
    parser = argparse.ArgumentParser(prog="csi_driver.py <repo-root>")
    parser.add_argument("--name", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--registry", required=True)
    args = parser.parse_args(sys.argv[2:])
    with tempfile.TemporaryDirectory() as out_dir:
        serve(args, *stubs(repo_root, out_dir))


if __name__ == "__main__":
    main()
