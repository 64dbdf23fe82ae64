"""A stand-in for crictl with the subcommands kubeadm v1.20.2 runs, for e2e/kubeadm/.

No registry reachable here serves cri-tools (Debian bookworm has no crictl package), and
kubeadm init refuses to run without one: its preflight phase pulls (or finds) the control-plane
images through `crictl inspecti` / `crictl pull`, checks the runtime with `crictl info`, and
`kubeadm reset` removes the pods with `crictl pods -q`, `crictl stopp` and `crictl rmp`. This
script does exactly those calls over the CRI runtime.v1 API (proto/runtime/v1/api.proto of this
repository), with grpcio from hack/testbed/grpcio-venv.sh:

  crictl [-r|--runtime-endpoint ENDPOINT] [-i|--image-endpoint ENDPOINT] [-t|--timeout D] CMD
    info                 RuntimeService.Status (verbose), printed as JSON
    version              RuntimeService.Version
    pods [-q]            ListPodSandbox (ids with -q)
    stopp ID...          StopPodSandbox
    rmp ID...            RemovePodSandbox
    inspecti IMAGE...    ImageStatus; exits 1 if an image is not there
    images [-q]          ListImages
    pull IMAGE           PullImage (fails here for anything not imported: no registry)

Run as: python crictl.py --stubs DIR [crictl arguments]; the wrapper e2e/kubeadm/node.sh puts on
the node's PATH as `crictl` passes --stubs (where the generated runtime.v1 modules live).
Output formats follow crictl's where kubeadm parses them (`pods -q`: one id a line).
"""

import json
import os
import sys


def die(msg, code=1):
    print(f"crictl (kubelet-rs stand-in): {msg}", file=sys.stderr)
    sys.exit(code)


def parse(argv):
    stubs = None
    endpoint = os.environ.get("CONTAINER_RUNTIME_ENDPOINT", "unix:///run/containerd/containerd.sock")
    image_endpoint = os.environ.get("IMAGE_SERVICE_ENDPOINT", "")
    timeout = 10.0
    rest = []
    i = 0
    while i < len(argv):
        a = argv[i]
        value = None
        if "=" in a and a.startswith("--"):
            a, value = a.split("=", 1)
        if a in ("--stubs", "-r", "--runtime-endpoint", "-i", "--image-endpoint", "-t", "--timeout"):
            if value is None:
                i += 1
                if i >= len(argv):
                    die(f"{a} needs a value", 2)
                value = argv[i]
            if a == "--stubs":
                stubs = value
            elif a in ("-r", "--runtime-endpoint"):
                endpoint = value
            elif a in ("-i", "--image-endpoint"):
                image_endpoint = value
            else:
                timeout = float(value.rstrip("s"))
        else:
            rest.append(argv[i])
        i += 1
    if not rest:
        die("no command (supported: info version pods stopp rmp inspecti images pull)", 2)
    return stubs, endpoint, image_endpoint or endpoint, timeout, rest


def channel_target(endpoint):
    # crictl takes unix:///path, or a bare path as kubeadm sometimes passes.
    if endpoint.startswith("unix://"):
        return "unix:" + endpoint[len("unix://"):]
    if endpoint.startswith("/"):
        return "unix:" + endpoint
    die(f"unsupported endpoint {endpoint}", 2)


def main():
    stubs, endpoint, image_endpoint, timeout, rest = parse(sys.argv[1:])
    if not stubs:
        die("--stubs DIR missing (run through e2e/kubeadm's crictl wrapper)", 2)
    sys.path.insert(0, stubs)
    import grpc  # noqa: E402
    from google.protobuf import json_format  # noqa: E402
    import api_pb2 as pb  # noqa: E402
    import api_pb2_grpc as pbg  # noqa: E402

    cmd, args = rest[0], rest[1:]
    rt = pbg.RuntimeServiceStub(grpc.insecure_channel(channel_target(endpoint)))
    im = pbg.ImageServiceStub(grpc.insecure_channel(channel_target(image_endpoint)))
    quiet = "-q" in args or "--quiet" in args
    names = [a for a in args if not a.startswith("-")]

    def show(msg):
        print(json.dumps(json_format.MessageToDict(msg), indent=2))

    try:
        if cmd == "info":
            show(rt.Status(pb.StatusRequest(verbose=True), timeout=timeout))
        elif cmd == "version":
            v = rt.Version(pb.VersionRequest(version="v1"), timeout=timeout)
            print(f"Version:  {v.version}\nRuntimeName:  {v.runtime_name}\n"
                  f"RuntimeVersion:  {v.runtime_version}\nRuntimeApiVersion:  {v.runtime_api_version}")
        elif cmd == "pods":
            for p in rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=timeout).items:
                if quiet:
                    print(p.id)
                else:
                    print(f"{p.id[:13]}  {pb.PodSandboxState.Name(p.state)}  "
                          f"{p.metadata.name}  {p.metadata.namespace}")
        elif cmd == "stopp":
            for pod in names:
                rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=timeout)
                print(f"Stopped sandbox {pod}")
        elif cmd == "rmp":
            for pod in names:
                rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod), timeout=timeout)
                print(f"Removed sandbox {pod}")
        elif cmd == "inspecti":
            missing = False
            for name in names:
                r = im.ImageStatus(pb.ImageStatusRequest(image=pb.ImageSpec(image=name)), timeout=timeout)
                if not r.image.id:
                    print(f"no such image {name} present", file=sys.stderr)
                    missing = True
                else:
                    show(r)
            if missing:
                sys.exit(1)
        elif cmd == "images":
            for i in im.ListImages(pb.ListImagesRequest(), timeout=timeout).images:
                if quiet:
                    print(i.id)
                else:
                    print(f"{' '.join(i.repo_tags) or '<none>'}  {i.id[:20]}")
        elif cmd == "pull":
            if len(names) != 1:
                die("pull takes one image", 2)
            r = im.PullImage(pb.PullImageRequest(image=pb.ImageSpec(image=names[0])), timeout=120)
            print(f"Image is up to date for {r.image_ref}")
        else:
            die(f"unsupported command {cmd} (supported: info version pods stopp rmp inspecti images pull)", 2)
    except grpc.RpcError as e:
        die(f"{cmd}: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()
