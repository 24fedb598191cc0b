#!/usr/bin/env python3
"""The MCP frontend's CPU time per whole-file `EditFiles` write, for one
or two binaries, round by round (A, then B).

Each round starts a real frontend (`BIN mcp`, which launches its
guardian) in a private HOME, initialises a thread, and sends CALLS writes
of SIZE bytes of the stress tool's alphabet (letters, digits, spaces, a
newline in about 68 bytes) to four files of the workspace, each call
after the previous reply. The frontend process's user + system time
(`/proc/PID/stat`, every thread) over the writes, divided by CALLS, is the
figure. Prints one JSON line per round and, with two binaries, the median
of the per-round ratios B / A.

Usage: benches/mcp_write.py BIN_A [BIN_B] [--rounds N] [--calls N] [--size BYTES]
"""
import json, os, random, shutil, statistics, subprocess, sys, tempfile, time

argv = sys.argv[1:]


def opt(name, default):
    if name in argv:
        i = argv.index(name)
        v = int(argv[i + 1])
        del argv[i:i + 2]
        return v
    return default


ROUNDS = opt("--rounds", 3)
CALLS = opt("--calls", 200)
SIZE = opt("--size", 500_000)
BINS = [os.path.abspath(b) for b in argv]
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789      \n"
CONTENT = "".join(random.Random(1).choice(ALPHABET) for _ in range(SIZE))


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(binary):
    home = tempfile.mkdtemp(prefix="winx-bench-write-")
    ws = os.path.join(home, "ws")
    os.makedirs(ws)
    run = os.path.join(home, "run")
    os.makedirs(run, mode=0o700)
    env = dict(os.environ, HOME=home, XDG_DATA_HOME=os.path.join(home, "data"), XDG_RUNTIME_DIR=run)
    p = subprocess.Popen([binary, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, cwd=ws)
    n = 0

    def call(method, params, notify=False):
        nonlocal n
        n += 1
        m = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            m["id"] = n
        p.stdin.write((json.dumps(m) + "\n").encode())
        p.stdin.flush()
        return None if notify else json.loads(p.stdout.readline())

    try:
        call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "bench", "version": "1"}})
        call("notifications/initialized", {}, notify=True)
        call("tools/call", {"name": "Initialize", "arguments": {"any_workspace_path": ws, "thread_id": "bench"}})
        before = cpu_seconds(p.pid)
        t0 = time.monotonic()
        for k in range(CALLS):
            files = [{"file_path": os.path.join(ws, f"f{k % 4}.txt"), "mode": "replace", "content": CONTENT}]
            r = call("tools/call", {"name": "EditFiles",
                                    "arguments": {"thread_id": "bench", "workspace_root": ws, "files": files}})
            if r.get("result", {}).get("structuredContent", {}).get("status") != "completed":
                raise SystemExit(f"write {k} was not completed: {json.dumps(r)[:300]}")
        wall = time.monotonic() - t0
        cpu = cpu_seconds(p.pid) - before
    finally:
        p.stdin.close()
        p.wait()
        subprocess.run(["pkill", "-f", f"guardian --socket {run}/"], check=False)
        shutil.rmtree(home, ignore_errors=True)
    return {"bin": binary, "cpu_ms_per_write": round(1000 * cpu / CALLS, 3),
            "wall_ms_per_write": round(1000 * wall / CALLS, 3)}


ratios = []
for r in range(ROUNDS):
    res = [one_round(b) for b in BINS]
    for x in res:
        print(json.dumps(dict(x, round=r, size=SIZE, calls=CALLS, load=open("/proc/loadavg").read().split()[0])))
    if len(res) == 2:
        ratios.append(res[1]["cpu_ms_per_write"] / res[0]["cpu_ms_per_write"])
if ratios:
    print(json.dumps({"median_ratio_cpu_b_over_a": round(statistics.median(ratios), 3),
                      "ratios": [round(x, 3) for x in ratios]}))
