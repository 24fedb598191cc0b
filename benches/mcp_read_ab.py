#!/usr/bin/env python3
"""ReadFiles of N helpers through one long-lived frontend per binary, two
binaries A/B: the time to the reply's last byte (the client reads the line
and does not parse it) and the frontend's CPU time per call, against
`openssl dgst -sha256` over the same files, warm cache.

Each round runs openssl, then A's ReadFiles, openssl, B's (B first in every
other round, so neither always follows the other). Prints per binary the
median time to the last byte and its ratio to openssl's median, the mean
frontend CPU (user + system of all its threads, /proc/PID/stat, so a call's
figure is in clock ticks and only the mean over rounds is finer), the reply
size and the client's own CPU; then B / A: the median of the per-round
ratios of the time to the last byte, and the ratio of the mean CPU.

Usage: benches/mcp_read_ab.py BIN_A[,BIN_B] ROUNDS [MCP ARGS...]
Environment: KIND=text (printable lines, the first 256 KiB returned) or
bin (random bytes, no content), N helpers (100) of SIZE bytes (655360).
`N=1 SIZE=672000` gives the reply size of one 672,000-byte helper.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from helper_text import text_bytes

BINS = [os.path.abspath(b) for b in sys.argv[1].split(",")]
ROUNDS = int(sys.argv[2])
MCP_ARGS = sys.argv[3:]
N, SIZE = int(os.environ.get("N", 100)), int(os.environ.get("SIZE", 640 * 1024))
KIND = os.environ.get("KIND", "text")
CLK = os.sysconf("SC_CLK_TCK")

def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK

class Frontend:
    """A guardian and a frontend of BIN in a directory of their own."""
    def __init__(self, bin, root):
        ws = os.path.join(root, "ws"); os.makedirs(ws)
        env = dict(os.environ, XDG_DATA_HOME=os.path.join(root, "data"), HOME=os.path.join(root, "home"))
        env.pop("WINX_GUARDIAN_SOCKET", None); env.pop("XDG_RUNTIME_DIR", None)
        sock = os.path.join(root, "run", "g.sock")
        self.g = subprocess.Popen([bin, "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        self.g.stdout.readline()
        self.m = subprocess.Popen([bin, "mcp", "--socket", sock, *MCP_ARGS], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=1 << 20)
        self.rid = 0
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.rpc("notifications/initialized", notify=True)
        init = json.loads(self.call("Initialize", {"any_workspace_path": ws, "thread_id": "bench"}))
        session = init["result"]["structuredContent"]["temporary_artifact_dir"]
        self.paths = []
        for i in range(N):
            p = os.path.join(session, f"h{i:03}.{KIND}")
            with open(p, "wb") as f:
                f.write(os.urandom(SIZE) if KIND == "bin" else text_bytes(SIZE, i))
            self.paths.append(p)
        for p in self.paths:
            open(p, "rb").read()  # warm

    def rpc(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None: msg["params"] = params
        if not notify:
            self.rid += 1; msg["id"] = self.rid
        self.m.stdin.write((json.dumps(msg) + "\n").encode()); self.m.stdin.flush()
        return None if notify else self.m.stdout.readline()

    def call(self, name, args):
        return self.rpc("tools/call", {"name": name, "arguments": args})

    def close(self):
        for p in (self.m, self.g):
            p.kill(); p.wait()

root = tempfile.mkdtemp(prefix="winx-mcp-read-ab-")
fronts = []
try:
    for k, b in enumerate(BINS):
        fronts.append(Frontend(b, os.path.join(root, str(k))))
    wall = [[] for _ in BINS]; cpu = [[] for _ in BINS]; client = [[] for _ in BINS]; size = [0] * len(BINS)
    ossl = []
    load_before = open("/proc/loadavg").read().split()[0]
    for r in range(ROUNDS):
        order = list(range(len(BINS)))
        if r % 2: order.reverse()
        for k in order:
            f = fronts[k]
            t = time.perf_counter()
            subprocess.run(["openssl", "dgst", "-sha256", *f.paths], stdout=subprocess.DEVNULL, check=True)
            ossl.append(time.perf_counter() - t)
            c0, u0, t = cpu_s(f.m.pid), os.times(), time.perf_counter()
            line = f.call("ReadFiles", {"thread_id": "bench", "file_paths": f.paths})
            wall[k].append(time.perf_counter() - t)
            u1 = os.times()
            cpu[k].append(cpu_s(f.m.pid) - c0); client[k].append(u1.user + u1.system - u0.user - u0.system)
            size[k] = len(line)
    o = statistics.median(ossl) * 1000
    print(f"{KIND}, {N} x {SIZE} bytes, {ROUNDS} rounds, mcp args {MCP_ARGS}; load before {load_before}, after "
          f"{open('/proc/loadavg').read().split()[0]}; openssl median {o:.1f} ms")
    for k, b in enumerate(BINS):
        w = statistics.median(wall[k]) * 1000
        print(f"{b}: last byte median {w:.1f} ms = {w / o:.2f} x openssl; frontend CPU mean "
              f"{statistics.mean(cpu[k]) * 1000:.1f} ms; reply {size[k]} bytes; client CPU mean "
              f"{statistics.mean(client[k]) * 1000:.1f} ms")
    if len(BINS) == 2:
        paired = statistics.median([y / x for x, y in zip(wall[0], wall[1])])
        cpu_ratio = statistics.mean(cpu[1]) / statistics.mean(cpu[0]) if sum(cpu[0]) else float("nan")
        print(f"B / A: last byte {paired:.3f} (median of per-round ratios), frontend CPU {cpu_ratio:.3f} "
              f"(ratio of means)")
finally:
    for f in fronts:
        f.close()
    shutil.rmtree(root, ignore_errors=True)
