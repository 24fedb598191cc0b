#!/usr/bin/env python3
"""The warm release of one 4 KiB helper at an MCP client, two binaries
A/B in the same rounds, against `find ROOTS -printf '%D %i\\n'`.

Each binary gets a directory of its own: a real guardian, a real MCP
frontend (raw JSON-RPC over stdio) and 48,000 entries in its backing roots
(48 directories of 999 files in `W/.winx/scratch`, the shape of
benches/mcp_single.py). A first release (the cold one) and a second are
not timed. Then each round writes and reads (untimed) one fresh helper per
binary, runs `find` over A's roots, and releases A's helper and B's (B
first in every other round, so neither always follows the other). Because
both run in the same seconds, the machine's drift hits both alike: the
median of the per-round ratios B / A compares the builds, and each
binary's median release against the median `find` gives the target's
ratio. Prints one JSON line; the load before and after.

Usage: benches/mcp_release_ab.py BIN_A BIN_B [ROUNDS]
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from mcp_common import Bench

BINS = [os.path.abspath(b) for b in sys.argv[1:3]]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 40
ENTRIES = 48_000


def load():
    return open("/proc/loadavg").read().split()[0]


class Side(Bench):
    """A guardian and a frontend of one binary in a directory of its own."""

    def __init__(self, binary, root):
        super().__init__(root=root)
        self.scratch = os.path.join(self.ws, ".winx", "scratch")
        os.makedirs(self.scratch)
        for d in range(ENTRIES // 1000):
            dd = os.path.join(self.scratch, f"d{d:03}")
            os.makedirs(dd)
            for f in range(999):
                open(os.path.join(dd, f"f{f}"), "wb").close()
        self.start(binary)
        init = self.call("Initialize", {"any_workspace_path": self.ws, "thread_id": "bench"})
        self.session = init["temporary_artifact_dir"]
        data = os.path.join(root, "data", "winx")
        self.roots = [self.scratch, os.path.join(data, "executions"), os.path.join(data, "receipts")]
        self.n = 0

    def prepare(self):
        """Writes and reads one fresh helper; returns the release request."""
        self.n += 1
        return self.release_request(self.read_helper(self.session, self.n))

    def timed_release(self, req):
        t = time.perf_counter()
        res = self.call("EditFiles", req)
        dt = time.perf_counter() - t
        assert res["status"] == "completed", res
        return dt

    def find(self):
        t = time.perf_counter()
        subprocess.run(["find", *[x for x in self.roots if os.path.exists(x)], "-printf", "%D %i\n"],
                       stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t



top = tempfile.mkdtemp(prefix="winx-mcp-release-ab-")
sides = []
try:
    sides = [Side(b, os.path.join(top, f"s{i}")) for i, b in enumerate(BINS)]
    for s in sides:
        s.timed_release(s.prepare())  # cold
    time.sleep(0.05)
    for s in sides:
        s.timed_release(s.prepare())
    load_before = load()
    rows = {"find": [], "a": [], "b": []}
    for i in range(ROUNDS):
        reqs = [s.prepare() for s in sides]
        rows["find"].append(sides[0].find())
        order = [0, 1] if i % 2 == 0 else [1, 0]
        for k in order:
            rows["ab"[k]].append(sides[k].timed_release(reqs[k]))
    med = lambda v: round(statistics.median(v) * 1000, 3)
    out = {
        "rounds": ROUNDS,
        "find_ms": med(rows["find"]),
        "a_ms": med(rows["a"]),
        "b_ms": med(rows["b"]),
        "a_min_ms": round(min(rows["a"]) * 1000, 3),
        "b_min_ms": round(min(rows["b"]) * 1000, 3),
        "a_ratio_find": round(statistics.median(a / f for a, f in zip(rows["a"], rows["find"])), 4),
        "b_ratio_find": round(statistics.median(b / f for b, f in zip(rows["b"], rows["find"])), 4),
        "b_over_a": round(statistics.median(b / a for a, b in zip(rows["a"], rows["b"])), 3),
        "load_before": load_before,
        "load_after": load(),
    }
    print(json.dumps(out))
finally:
    for s in sides:
        s.stop()
    shutil.rmtree(top, ignore_errors=True)
