#!/usr/bin/env python3
"""Times ReadFiles and a release of 100 helpers of 640 KiB, with 48,000
entries in the backing roots, at an MCP client, against `openssl dgst
-sha256` over the same helpers (plus `find` over the same roots for the
release), interleaved round by round, warm cache.

Two kinds of helpers each round: binary (random bytes: ReadFiles returns no
content) and text (printable lines: ReadFiles returns the first 256 KiB of
each, 25 MB in all). Prints the medians (ms), the load before and after,
and the ratios of issue 12's table. `parse_*` is the part of a ReadFiles
time this Python client spends parsing the reply (json.loads), reported
apart because it is the client's cost, not the server's.

Usage: benches/mcp_vs_openssl.py BIN [ROUNDS] [MCP ARGS...]
(for instance `--text-result summary` after ROUNDS: the frontend's text
block is then a summary instead of the result object again)
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from helper_text import text_bytes

BIN = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 7
MCP_ARGS = sys.argv[3:]
N, SIZE, ENTRIES = 100, 640 * 1024, 48_000

def load():
    return open("/proc/loadavg").read().split()[0]

root = tempfile.mkdtemp(prefix="winx-mcp-bench-")
ws = os.path.join(root, "ws"); os.makedirs(ws)
env = dict(os.environ, XDG_DATA_HOME=os.path.join(root, "data"), HOME=os.path.join(root, "home"))
env.pop("WINX_GUARDIAN_SOCKET", None); env.pop("XDG_RUNTIME_DIR", None)
sock = os.path.join(root, "run", "g.sock")
g = subprocess.Popen([BIN, "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
g.stdout.readline()
m = subprocess.Popen([BIN, "mcp", "--socket", sock, *MCP_ARGS], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
rid = 0
parse_s = 0.0  # time the client spent in json.loads on the last reply
reply_bytes = 0  # length of the last reply line
def rpc(method, params=None, notify=False):
    global rid, parse_s, reply_bytes
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None: msg["params"] = params
    if not notify:
        rid += 1; msg["id"] = rid
    m.stdin.write((json.dumps(msg) + "\n").encode()); m.stdin.flush()
    if notify: return None
    while True:
        line = m.stdout.readline()
        t = time.perf_counter(); r = json.loads(line); parse_s = time.perf_counter() - t; reply_bytes = len(line)
        if r.get("id") == rid: return r
def call(name, args):
    return rpc("tools/call", {"name": name, "arguments": args})["result"]["structuredContent"]

def timed(rows, key, f):
    t = time.perf_counter(); out = f(); rows[key].append(time.perf_counter() - t); return out

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
    keys = ["openssl_bin", "read_bin", "parse_bin", "openssl_text", "read_text", "parse_text", "find", "release_bin",
            "release_text"]
    rows = {k: [] for k in keys}
    sizes = {}
    load_before = load()
    for r in range(ROUNDS):
        sets = {}
        for kind in ("bin", "text"):
            paths = []
            for i in range(N):
                p = os.path.join(session, f"h{r}_{i:03}.{'bin' if kind == 'bin' else 'txt'}")
                with open(p, "wb") as f:
                    f.write(os.urandom(SIZE) if kind == "bin" else text_bytes(SIZE, r * 1000 + i))
                paths.append(p)
            for p in paths: open(p, "rb").read()  # warm
            sets[kind] = paths
        reads = {}
        for kind, paths in sets.items():
            timed(rows, f"openssl_{kind}",
                  lambda: subprocess.run(["openssl", "dgst", "-sha256", *paths], stdout=subprocess.DEVNULL, check=True))
            reads[kind] = timed(rows, f"read_{kind}", lambda: call("ReadFiles", {"thread_id": "bench", "file_paths": paths}))
            rows[f"parse_{kind}"].append(parse_s)
            sizes[kind] = reply_bytes
            assert reads[kind]["status"] == "completed", reads[kind]["status"]
        assert reads["text"]["files"][0]["content"] is not None and reads["bin"]["files"][0]["binary"] is True
        timed(rows, "find", lambda: subprocess.run(["find", *[x for x in roots if os.path.exists(x)], "-printf", "%D %i %s\n"],
                                                 stdout=subprocess.DEVNULL, check=True))
        for kind in ("bin", "text"):
            files = [{"file_path": f["file_path"], "mode": "release_temporary", "expected_revision": f["revision"],
                      "artifact_generation": f["temporary_artifact"]["artifact_generation"]} for f in reads[kind]["files"]]
            res = timed(rows, f"release_{kind}", lambda: call("EditFiles", {"thread_id": "bench", "workspace_root": ws,
                                                                          "operation": "release_temporary", "files": files}))
            assert res["status"] == "completed", res
    med = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    print(json.dumps({k: round(v, 1) for k, v in med.items()}))
    print(f"load before {load_before}, after {load()}; {ROUNDS} rounds; mcp args {MCP_ARGS}")
    print(f"ReadFiles reply bytes: binary {sizes['bin']}, text {sizes['text']}")
    print(f"ReadFiles binary / openssl = {med['read_bin'] / med['openssl_bin']:.2f}")
    print(f"ReadFiles text / openssl = {med['read_text'] / med['openssl_text']:.2f}"
          f" (without the client's json.loads of the reply: {(med['read_text'] - med['parse_text']) / med['openssl_text']:.2f})")
    print(f"release text / (openssl + find) = {med['release_text'] / (med['openssl_text'] + med['find']):.2f}")
    print(f"release binary / (openssl + find) = {med['release_bin'] / (med['openssl_bin'] + med['find']):.2f}")
finally:
    m.kill(); g.terminate(); g.wait(); shutil.rmtree(root, ignore_errors=True)
