#!/usr/bin/env python3
# `true` in a thread's idle shell, two builds side by side, round by round:
# `benches/shell_true_ab.py OLD_BIN NEW_BIN [ROUNDS]` (ROUNDS = 200).
# Starts each build's guardian in a temporary directory of its own, opens one
# thread's shell in each, then times the guardian's `shell` op with `true`
# (socket round trip: the op, the line typed, the hook's prompt, the output's
# end marker) alternating the builds every call, the order flipped every round.
# Prints each build's median and the median of the per-round ratios NEW / OLD:
# on a loaded machine that ratio is what compares (benches/README.md).
import json, os, shutil, socket, statistics, subprocess, sys, tempfile, time

class World:
    def __init__(self, bin):
        self.tmp = tempfile.mkdtemp(prefix="winx-true-")
        for d in ("run", "ws", "data"): os.makedirs(f"{self.tmp}/{d}", mode=0o700)
        env = dict(os.environ, XDG_DATA_HOME=f"{self.tmp}/data", HOME=self.tmp)
        env.pop("WINX_GUARDIAN_SOCKET", None); env.pop("XDG_RUNTIME_DIR", None)
        sock = f"{self.tmp}/run/g.sock"
        self.g = subprocess.Popen([bin, "guardian", "--socket", sock], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.g.stdout.readline()
        s = socket.socket(socket.AF_UNIX); s.connect(sock); self.f = s.makefile("rwb"); self.n = 0
        self.call({"op": "hello", "protocol": 1, "client": "true-ab/1"})
        self.true()
    def call(self, req):
        self.n += 1; req["id"] = self.n
        self.f.write(json.dumps(req).encode() + b"\n"); self.f.flush()
        r = json.loads(self.f.readline()); assert r["ok"], r; return r
    def true(self):
        r = self.call({"op": "shell", "workspace": f"{self.tmp}/ws", "thread_id": "t", "action": {"type": "command", "command": "true"}, "wait_for_seconds": 10})
        assert r["status"] == "completed", r
    def timed(self):
        t = time.perf_counter(); self.true(); return time.perf_counter() - t
    def stop(self):
        self.g.terminate(); self.g.wait(); shutil.rmtree(self.tmp, ignore_errors=True)

old, new = World(sys.argv[1]), World(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 200
to, tn, ratios = [], [], []
for i in range(rounds):
    if i % 2: b = new.timed(); a = old.timed()
    else: a = old.timed(); b = new.timed()
    to.append(a); tn.append(b); ratios.append(b / a)
ms = lambda v: f"{statistics.median(v) * 1e3:.2f} ms"
print(f"old {ms(to)} (min {min(to) * 1e3:.2f}), new {ms(tn)} (min {min(tn) * 1e3:.2f}), "
      f"new/old median of per-round ratios {statistics.median(ratios):.3f}, ratio of minima {min(tn) / min(to):.3f}, {rounds} rounds")
old.stop(); new.stop()
