#!/usr/bin/env python3
"""Usage: fake_apiserver.py PORT TOKEN

A small stand-in for the Kubernetes API on 127.0.0.1:PORT, for the installer's tests: only the
calls installer.sh and the test's stand-in kubelets make, with the apiserver's semantics where
the installer depends on them:
  - Nodes: GET, list with a labelSelector of one key ("key" or "key=value"), create (POST),
    PATCH (JSON merge patch, null deletes) of the object and of its /status;
  - ConfigMaps: GET, POST, PATCH (merge patch);
  - Leases (coordination.k8s.io/v1): GET, POST (409 AlreadyExists when it exists), PUT (409
    Conflict unless metadata.resourceVersion is the stored one: optimistic concurrency);
  - every request needs "Authorization: Bearer TOKEN" (401 otherwise);
  - every object gets a fresh resourceVersion on each write.
For the test's checks: GET /_test/events lists, in order, each successful Lease write (holder)
and each Node status patch (Ready, kubeletVersion) with a monotonic time stamp.
"""

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STORE = {}  # (kind, namespace, name) -> object
EVENTS = []
RV = [0]


def next_rv():
    RV[0] += 1
    return str(RV[0])


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "reason": reason, "message": message, "code": code}


ROUTES = [
    (re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+)(?P<sub>/status)?)?$"), "Node", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?$"), "ConfigMap", None),
    (re.compile(r"^/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$"),
     "Lease", None),
]


def handle(method, path, query, body):
    if path == "/_test/events" and method == "GET":
        return 200, EVENTS
    for rx, kind, _ in ROUTES:
        m = rx.match(path)
        if m:
            break
    else:
        return status(404, "NotFound", f"no route {path}")
    groups = m.groupdict()
    ns, name, sub = groups.get("ns") or "", groups.get("name"), groups.get("sub")
    key = (kind, ns, name)
    if name is None:
        if method == "GET":
            sel = query.get("labelSelector", "")
            items = [o for (k, n, _), o in sorted(STORE.items()) if k == kind and n == ns]
            if sel:
                lk, _, lv = sel.partition("=")
                items = [o for o in items if lk in o["metadata"].get("labels", {})
                         and (not lv or o["metadata"]["labels"][lk] == lv)]
            return 200, {"kind": kind + "List", "items": items}
        if method == "POST":
            obj = json.loads(body)
            name = obj["metadata"]["name"]
            key = (kind, ns, name)
            if key in STORE:
                return status(409, "AlreadyExists", f"{kind} {name} already exists")
            obj["metadata"]["resourceVersion"] = next_rv()
            if ns:
                obj["metadata"]["namespace"] = ns
            STORE[key] = obj
            if kind == "Lease":
                EVENTS.append({"t": time.monotonic(), "type": "lease",
                               "holder": obj.get("spec", {}).get("holderIdentity", "")})
            return 201, obj
        return status(405, "MethodNotAllowed", method)
    obj = STORE.get(key)
    if obj is None:
        return status(404, "NotFound", f"{kind} {name} not found")
    if method == "GET":
        return 200, obj
    if method == "PATCH":
        new = merge_patch(obj, json.loads(body))
        new["metadata"]["resourceVersion"] = next_rv()
        STORE[key] = new
        if kind == "Node" and sub == "/status":
            ready = [c for c in new.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
            EVENTS.append({"t": time.monotonic(), "type": "node-status", "node": name,
                           "ready": ready[0]["status"] if ready else "",
                           "version": new["status"].get("nodeInfo", {}).get("kubeletVersion", "")})
        return 200, new
    if method == "PUT":
        new = json.loads(body)
        if new.get("metadata", {}).get("resourceVersion") != obj["metadata"]["resourceVersion"]:
            return status(409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
        new["metadata"]["resourceVersion"] = next_rv()
        STORE[key] = new
        if kind == "Lease":
            EVENTS.append({"t": time.monotonic(), "type": "lease",
                           "holder": new.get("spec", {}).get("holderIdentity", "")})
        return 200, new
    if method == "DELETE":
        del STORE[key]
        return 200, obj
    return status(405, "MethodNotAllowed", method)


class Handler(BaseHTTPRequestHandler):
    token = ""

    def log_message(self, fmt, *args):
        pass

    def _do(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            code, out = status(401, "Unauthorized", "Unauthorized")
        else:
            path, _, qs = self.path.partition("?")
            query = dict(p.split("=", 1) for p in qs.split("&") if "=" in p)
            with LOCK:
                try:
                    code, out = handle(self.command, path, query, body)
                except (ValueError, KeyError) as e:
                    code, out = status(400, "BadRequest", str(e))
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _do


def main():
    port, token = int(sys.argv[1]), sys.argv[2]
    Handler.token = token
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.serve_forever()


if __name__ == "__main__":
    main()
