"""A device plugin for benchmarks, served by grpcio (grpc C-core) as a process of its own, so that
either kubelet can use it (the upstream kubelet's grpc-go v1.20 client names a unix socket's path
as the HTTP/2 authority, which the Rust stack of the tests' own plugin, tests/common/device_plugin.rs,
refuses). Serves DevicePlugin v1beta1 on DIR/<socket> with COUNT healthy devices and registers
RESOURCE with the kubelet's Registration service on DIR/kubelet.sock, registering again whenever
that socket is made anew (a kubelet restart). Allocate answers each container with the env
BENCH_DEVICES=<its device ids>. Runs until SIGTERM or SIGINT, then takes its socket away.

Usage: device_plugin.py <repo-root> --dir DIR --resource RESOURCE [--socket NAME] [--count N]
"""

import argparse
import concurrent.futures
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc


def stubs(repo_root, out_dir):
    """Generates the Python stubs from the project's own proto file."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", f"{repo_root}/proto/deviceplugin/v1beta1",
         f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", "api.proto"],
        check=True,
    )
    sys.path.insert(0, out_dir)
    import api_pb2
    import api_pb2_grpc
    return api_pb2, api_pb2_grpc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("repo_root")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--resource", required=True)
    ap.add_argument("--socket", default="bench-device.sock")
    ap.add_argument("--count", type=int, default=4)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="device-plugin-stubs-")
    pb, pb_grpc = stubs(args.repo_root, work)
    stop = threading.Event()
    devices = [pb.Device(ID=f"dev-{i}", health="Healthy") for i in range(args.count)]

    class Plugin(pb_grpc.DevicePluginServicer):
        def GetDevicePluginOptions(self, request, context):
            return pb.DevicePluginOptions()

        def ListAndWatch(self, request, context):
            yield pb.ListAndWatchResponse(devices=devices)
            while not stop.is_set() and context.is_active():
                stop.wait(1)

        def GetPreferredAllocation(self, request, context):
            return pb.PreferredAllocationResponse()

        def Allocate(self, request, context):
            return pb.AllocateResponse(container_responses=[
                pb.ContainerAllocateResponse(envs={"BENCH_DEVICES": ",".join(r.devices_ids)})
                for r in request.container_requests
            ])

        def PreStartContainer(self, request, context):
            return pb.PreStartContainerResponse()

    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, args.socket)
    if os.path.exists(path):
        os.unlink(path)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_DevicePluginServicer_to_server(Plugin(), server)
    server.add_insecure_port(f"unix://{path}")
    server.start()

    def on_signal(*_):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    kubelet = os.path.join(args.dir, "kubelet.sock")
    registered_for = None
    while not stop.is_set():
        try:
            ident = os.stat(kubelet).st_ino
        except FileNotFoundError:
            ident = None
        if ident is not None and ident != registered_for:
            try:
                with grpc.insecure_channel(f"unix://{kubelet}") as channel:
                    pb_grpc.RegistrationStub(channel).Register(
                        pb.RegisterRequest(version="v1beta1", endpoint=args.socket,
                                           resource_name=args.resource),
                        timeout=10,
                    )
                registered_for = ident
                print(f"registered {args.resource} ({args.count} devices)", flush=True)
            except grpc.RpcError as e:
                print(f"register: {e.code()}: {e.details()}", flush=True)
        stop.wait(1)
    server.stop(2)
    if os.path.exists(path):
        os.unlink(path)


if __name__ == "__main__":
    main()
