#!/usr/bin/env python3
"""The MCP frontend's resident memory (`VmRSS`) before and after each
hostile request of issue 58, point 2: 100,000 pings written at once; a
200 MB line without a newline (then a newline and a ping); `ReadFiles`
of 1,000,000 and of 200,000 paths; three `BashCommand`s with a 10 MB
`command`.

Starts a private guardian and one frontend (`BIN guardian`, `BIN mcp`,
in a private HOME and XDG_DATA_HOME), initialises a thread, and after
each request prints the RSS right after its answer and 3 s later (the
frontend gives freed memory back once idle). `PATHS=200000` leaves out
the 1,000,000-path request (minutes on an old debug build); `ROUNDS=N`
repeats the pings.

Usage: benches/mcp_memory.py BIN
"""
import json, os, subprocess, sys, tempfile, threading, time, queue

BIN = sys.argv[1]
root = tempfile.mkdtemp(prefix="w58rss-")
for d in ("data", "home", "run", "ws"):
    os.makedirs(os.path.join(root, d), mode=0o700)
env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "WINX_GUARDIAN_SOCKET", "XDG_DATA_HOME")}
env.update(XDG_DATA_HOME=os.path.join(root, "data"), HOME=os.path.join(root, "home"), RUST_LOG="warn")
sock = os.path.join(root, "run", "g.sock")
g = subprocess.Popen([BIN, "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE, stderr=open(os.path.join(root, "g.log"), "w"))
g.stdout.readline()
m = subprocess.Popen([BIN, "mcp", "--socket", sock], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=open(os.path.join(root, "m.log"), "w"), bufsize=0)
lines = queue.Queue()

def reader():
    for l in m.stdout:
        lines.put(l)
    lines.put(None)

threading.Thread(target=reader, daemon=True).start()

def send(obj):
    m.stdin.write((json.dumps(obj) + "\n").encode())

def recv(timeout=120):
    l = lines.get(timeout=timeout)
    return json.loads(l)

def rss():
    for l in open(f"/proc/{m.pid}/status"):
        if l.startswith("VmRSS:"):
            return int(l.split()[1]) / 1024

send({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "rss", "version": "0"}}})
recv()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
ws = os.path.join(root, "ws")
send({"jsonrpc": "2.0", "id": "I", "method": "tools/call", "params": {"name": "Initialize", "arguments": {"any_workspace_path": ws, "thread_id": "r"}}})
recv()
time.sleep(2)

def sync(tag):
    send({"jsonrpc": "2.0", "id": tag, "method": "ping"})
    while True:
        r = recv()
        if r.get("id") == tag:
            return

def report(name, before, t0, note=""):
    after = rss()
    el = time.time() - t0
    time.sleep(3)
    idle = rss()
    print(f"{name:34s} before {before:7.1f} MiB  after {after:7.1f} MiB  after 3 s idle {idle:7.1f} MiB  ({el:.1f} s) {note}", flush=True)

rounds = int(os.environ.get("ROUNDS", "1"))
for rnd in range(rounds):
    b = rss(); t0 = time.time()
    m.stdin.write(b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i for i in range(100_000)))
    for _ in range(100_000):
        recv()
    report("100,000 pings", b, t0)

b = rss(); t0 = time.time()
chunk = b"x" * (8 << 20)
def big():
    for _ in range(25):
        m.stdin.write(chunk)
    m.stdin.write(b"\n")
th = threading.Thread(target=big); th.start()
th.join()
first = None
send({"jsonrpc": "2.0", "id": "after", "method": "ping"})
while True:
    r = recv()
    if first is None:
        first = r
    if r.get("id") == "after":
        break
report("200 MB line, no newline", b, t0, "first answer: " + json.dumps(first)[:90])

for n in [int(x) for x in os.environ.get("PATHS", "1000000,200000").split(",")]:
    b = rss(); t0 = time.time()
    paths = [f"/nonexistent/w58/{i}" for i in range(n)]
    send({"jsonrpc": "2.0", "id": "R", "method": "tools/call", "params": {"name": "ReadFiles", "arguments": {"thread_id": "r", "file_paths": paths}}})
    r = recv(300)
    sc = r.get("result", {}).get("structuredContent", {})
    report(f"ReadFiles of {n:,} paths", b, t0, f"status {sc.get('status')} {sc.get('errorCode', '')}")

for i in range(3):
    b = rss(); t0 = time.time()
    send({"jsonrpc": "2.0", "id": "S", "method": "tools/call", "params": {"name": "BashCommand", "arguments": {"thread_id": "r", "command": "x" * (10 << 20)}}})
    r = recv(120)
    sc = r.get("result", {}).get("structuredContent", {})
    report(f"10 MB string argument #{i+1}", b, t0, f"status {sc.get('status')} {sc.get('errorCode', '')}")

m.stdin.close(); m.wait(10)
g.terminate(); g.wait(10)
