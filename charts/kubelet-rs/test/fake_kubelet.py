#!/usr/bin/python3
"""A stand-in kubelet for the installer's tests, run by a real systemd as kubelet.service.

The test writes two copies with ROLE set: "old" (the node's own kubelet, /usr/bin/kubelet of the
test host) and "new" (what the installer copies to the host as kubelet-rs). Like a kubelet it
  - prints "Kubernetes VERSION" for --version;
  - serves GET /healthz ("ok") on 127.0.0.1:PORT;
  - on start, and every 10 s, patches its Node's status on the API: Ready=True with a heartbeat
    of now and nodeInfo.kubeletVersion (VERSION without build metadata).
Its settings come from fake.json next to the --config file it is given (kubeadm's
/var/lib/kubelet/config.yaml): node, api, token, port and, for ROLE=new, new_mode:
  ok         behaves
  no-healthz healthz answers 500 "unhealthy"
  not-ready  reports Ready=False (KubeletNotReady)
Every start appends its argv to starts.log next to fake.json.
"""

import datetime
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

ROLE = "@ROLE@"
VERSION = {"old": "v1.33.5", "new": "v1.34.0+kubelet-rs.0.1.0-test"}[ROLE]


def main():
    if "--version" in sys.argv[1:]:
        print(f"Kubernetes {VERSION}")
        return
    config = next(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--config="))
    folder = os.path.dirname(config)
    with open(os.path.join(folder, "fake.json")) as f:
        conf = json.load(f)
    mode = conf.get("new_mode", "ok") if ROLE == "new" else "ok"
    with open(os.path.join(folder, "starts.log"), "a") as f:
        f.write(json.dumps({"role": ROLE, "mode": mode, "argv": sys.argv[1:], "t": time.time()}) + "\n")

    class Healthz(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            good = mode != "no-healthz" and self.path == "/healthz"
            body = b"ok" if good else b"unhealthy"
            self.send_response(200 if good else 500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer.allow_reuse_address = True
    srv = HTTPServer(("127.0.0.1", conf["port"]), Healthz)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    ready = "False" if mode == "not-ready" else "True"
    while True:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"status": {
            "nodeInfo": {"kubeletVersion": VERSION.split("+")[0]},
            "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": now,
                            "reason": "KubeletReady" if ready == "True" else "KubeletNotReady"}]}}
        req = urllib.request.Request(
            f"{conf['api']}/api/v1/nodes/{conf['node']}/status", method="PATCH",
            data=json.dumps(patch).encode(),
            headers={"Authorization": f"Bearer {conf['token']}",
                     "Content-Type": "application/merge-patch+json"})
        try:
            urllib.request.urlopen(req, timeout=5).read()
        except OSError as e:
            print(f"status update failed: {e}", file=sys.stderr)
        time.sleep(10)


if __name__ == "__main__":
    main()
