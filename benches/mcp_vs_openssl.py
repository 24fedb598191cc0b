#!/usr/bin/env python3
"""Times ReadFiles and a release of 100 helpers of 640 KiB, with 48,000
entries in the backing roots, at an MCP client, against `openssl dgst
-sha256` over the same helpers (plus `find` over the same roots for the
release), interleaved, warm cache. Usage: benches/mcp_vs_openssl.py BIN [ROUNDS]
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

BIN = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
N, SIZE, ENTRIES = 100, 640 * 1024, 48_000

root = tempfile.mkdtemp(prefix="winx-mcp-bench-")
ws = os.path.join(root, "ws"); os.makedirs(ws)
env = dict(os.environ, XDG_DATA_HOME=os.path.join(root, "data"), HOME=os.path.join(root, "home"))
env.pop("WINX_GUARDIAN_SOCKET", None); env.pop("XDG_RUNTIME_DIR", None)
sock = os.path.join(root, "run", "g.sock")
g = subprocess.Popen([BIN, "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
g.stdout.readline()
m = subprocess.Popen([BIN, "mcp", "--socket", sock], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
rid = 0
def rpc(method, params=None, notify=False):
    global rid
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None: msg["params"] = params
    if not notify:
        rid += 1; msg["id"] = rid
    m.stdin.write((json.dumps(msg) + "\n").encode()); m.stdin.flush()
    if notify: return None
    while True:
        r = json.loads(m.stdout.readline())
        if r.get("id") == rid: return r
def call(name, args):
    return rpc("tools/call", {"name": name, "arguments": args})["result"]["structuredContent"]

try:
    rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
    rpc("notifications/initialized", notify=True)
    init = call("Initialize", {"any_workspace_path": ws, "thread_id": "bench"})
    session = init["temporary_artifact_dir"]
    scratch = os.path.join(ws, ".winx", "scratch")
    for d in range(ENTRIES // 1000):
        dd = os.path.join(scratch, f"d{d:03}"); os.makedirs(dd)
        for f in range(999):
            open(os.path.join(dd, f"f{f}"), "wb").close()
    roots = [scratch, os.path.join(root, "data", "winx", "executions"), os.path.join(root, "data", "winx", "receipts")]
    rows = {"openssl": [], "find": [], "read": [], "release": []}
    for r in range(ROUNDS):
        paths = []
        for i in range(N):
            p = os.path.join(session, f"h{r}_{i:03}.bin")
            with open(p, "wb") as f: f.write(os.urandom(SIZE))
            paths.append(p)
        for p in paths: open(p, "rb").read()  # warm
        t = time.perf_counter(); subprocess.run(["openssl", "dgst", "-sha256", *paths], stdout=subprocess.DEVNULL, check=True)
        rows["openssl"].append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(["find", *[x for x in roots if os.path.exists(x)], "-printf", "%D %i %s\n"], stdout=subprocess.DEVNULL, check=True)
        rows["find"].append(time.perf_counter() - t)
        t = time.perf_counter(); read = call("ReadFiles", {"thread_id": "bench", "file_paths": paths}); rows["read"].append(time.perf_counter() - t)
        files = [{"file_path": f["file_path"], "mode": "release_temporary", "expected_revision": f["revision"],
                  "artifact_generation": f["temporary_artifact"]["artifact_generation"]} for f in read["files"]]
        t = time.perf_counter()
        res = call("EditFiles", {"thread_id": "bench", "workspace_root": ws, "operation": "release_temporary", "files": files})
        rows["release"].append(time.perf_counter() - t)
        assert res["status"] == "completed", res
    med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    print(json.dumps({k: round(v, 1) for k, v in med.items()}))
    print(f"ReadFiles / openssl = {med['read'] / med['openssl']:.2f}")
    print(f"release / (openssl + find) = {med['release'] / (med['openssl'] + med['find']):.2f}")
finally:
    m.kill(); g.terminate(); g.wait(); shutil.rmtree(root, ignore_errors=True)
