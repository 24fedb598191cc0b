#!/usr/bin/env python3
# Guardian memory with N idle shells: `benches/shell_memory.py BIN [N]` (N = 50).
# Starts BIN guardian in a temporary directory, opens one warm-up shell, then
# N threads' shells each running `true` over the socket, and prints VmRSS.
# Then each shell's monitor (the guardian's children, issue 54): its private
# memory (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup), RSS and
# PSS, mean and largest, and which program it runs.
import json, os, shutil, socket, subprocess, sys, tempfile, time
tmp = tempfile.mkdtemp(prefix="winx-mem-")
os.makedirs(f"{tmp}/run", mode=0o700); os.makedirs(f"{tmp}/ws"); os.makedirs(f"{tmp}/data")
env = dict(os.environ, XDG_DATA_HOME=f"{tmp}/data", HOME=tmp); env.pop("WINX_GUARDIAN_SOCKET", None); env.pop("XDG_RUNTIME_DIR", None)
sock = f"{tmp}/run/g.sock"
g = subprocess.Popen([sys.argv[1], "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
g.stdout.readline()
def rss(): return int([l for l in open(f"/proc/{g.pid}/status") if l.startswith("VmRSS")][0].split()[1])
s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rwb")
n = [0]
def call(req):
    n[0] += 1; req["id"] = n[0]; f.write(json.dumps(req).encode() + b"\n"); f.flush(); r = json.loads(f.readline()); assert r["ok"], r; return r
call({"op": "hello", "protocol": 1, "client": "mem/1"})
ws = f"{tmp}/ws"
def shell(t): return call({"op": "shell", "workspace": ws, "thread_id": t, "action": {"type": "command", "command": "true"}, "wait_for_seconds": 10})
shell("warm")
time.sleep(0.5); before = rss()
N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
for i in range(N):
    r = shell(f"t{i}"); assert r["status"] == "completed", r
time.sleep(1.0); after = rss()
print(f"guardian VmRSS before {before} KiB, after {N} idle shells {after} KiB, per shell {(after-before)/N:.1f} KiB")
def children(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try: out += [int(c) for c in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError: pass
    return out
def rollup(pid):
    f = {}
    for l in open(f"/proc/{pid}/smaps_rollup"):
        p = l.split()
        if len(p) >= 2 and p[0].endswith(":") and p[1].isdigit(): f[p[0][:-1]] = int(p[1])
    return f
mons = []
for c in children(g.pid):
    try:
        argv = open(f"/proc/{c}/cmdline", "rb").read().split(b"\0")
        if len(argv) < 2 or argv[1] != b"__winx-release-monitor": continue
        r = rollup(c); exe = os.readlink(f"/proc/{c}/exe")
    except OSError: continue
    mons.append((r.get("Private_Clean", 0) + r.get("Private_Dirty", 0), r.get("Rss", 0), r.get("Pss", 0), exe))
if mons:
    priv = [m[0] for m in mons]
    print(f"{len(mons)} monitors ({mons[0][3]}): private {sum(priv)/len(priv):.0f} KiB mean, {max(priv)} KiB largest; "
          f"RSS {sum(m[1] for m in mons)/len(mons):.0f} KiB mean, PSS {sum(m[2] for m in mons)/len(mons):.0f} KiB mean")
else:
    print("no monitors (a build without them)")
g.terminate(); g.wait()
shutil.rmtree(tmp, ignore_errors=True)
