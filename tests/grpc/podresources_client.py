"""Calls the kubelet's pod-resources socket the way a monitoring agent written in Python does:
grpcio (grpc C-core) with a plain `unix://` target and default channel options.

Usage: podresources_client.py <repo-root> <socket> <namespace> <pod>
Prints one JSON object: what List, Get and GetAllocatableResources answered (or the error).
"""

import json
import subprocess
import sys
import tempfile

import grpc


def stubs(repo_root, out_dir):
    """Generates the Python stubs from the project's own proto file."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc",
         "-I", f"{repo_root}/proto/podresources/v1",
         f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", "api.proto"],
        check=True,
    )
    sys.path.insert(0, out_dir)
    import api_pb2
    import api_pb2_grpc
    return api_pb2, api_pb2_grpc


def pods(response_pods):
    return [{"namespace": p.namespace, "name": p.name,
             "containers": [c.name for c in p.containers]} for p in response_pods]


def main():
    repo_root, socket, namespace, pod = sys.argv[1:5]
    result = {}
    with tempfile.TemporaryDirectory() as out_dir:
        api, api_grpc = stubs(repo_root, out_dir)
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            client = api_grpc.PodResourcesListerStub(channel)
            calls = {
                "list": lambda: pods(client.List(api.ListPodResourcesRequest(), timeout=10).pod_resources),
                "get": lambda: pods([client.Get(api.GetPodResourcesRequest(
                    pod_name=pod, pod_namespace=namespace), timeout=10).pod_resources]),
                "allocatable": lambda: {"devices": len(client.GetAllocatableResources(
                    api.AllocatableResourcesRequest(), timeout=10).devices)},
            }
            for name, call in calls.items():
                try:
                    result[name] = call()
                except grpc.RpcError as err:
                    result[name] = {"error": f"{err.code()}: {err.details()}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
