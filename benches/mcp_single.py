#!/usr/bin/env python3
"""Times the release of one 4 KiB helper at an MCP client, with 48,000
entries in the backing roots, against `find ROOTS -printf '%D %i\n'` over
the same roots, side by side round by round (find, then the release).

A real guardian and a real MCP frontend (raw JSON-RPC over stdio). Each
round writes one fresh 4 KiB helper and reads it with ReadFiles (not
timed), then times `find` and the EditFiles release (timed at the client:
the JSON-RPC hop, the frontend's checks, the guardian RPC, the engine's
release and the durable receipt). The first release after the guardian
started is the cold one (its directory cache is empty) and is reported
apart; the rounds after it are warm. Prints one JSON line: the medians
(ms), the median of the per-round ratios release / find, the cold figures,
and the load before and after.

With WINX_BENCH_GUARDIAN_LOG=FILE the guardian's stderr goes to FILE with
RUST_LOG set to log each release's step times (benches/PROFILE.md).

Usage: benches/mcp_single.py BIN [ROUNDS] [--deep] [--receipts N [--sharded]] [--sleepers N] [--shell]
  --shell: the thread's shell is started (BashCommand `true`) before the
          rounds and stays idle at its prompt through them, as an agent's
          thread has one: each release's liveness answer then looks at an
          execution (its monitor, the shell's idle rule), not at orphans
          alone
  --sleepers N: N idle processes of the user (`sleep`, its three standard
          descriptors on /dev/null) run beside
          the guardian for the whole run, started before it and killed at
          the end (a desktop's 500-1,500 processes, a build host's more)
  --deep: the 48,000 entries as 61 chains of 16 nested directories (976
          directories, the shape of benches/common) instead of 48
          directories of 999 files (the shape of mcp_vs_openssl.py)
  --receipts N: N of the 48,000 entries are kept receipts in D/receipts
          (a store that has served many releases), the rest in scratch;
          flat (`<key>.json`, the layout before a41c256) or, with
          --sharded, in shard directories (`<hh>/<key>.json`, the layout
          since): give each binary the layout it writes
"""
import hashlib, json, os, statistics, subprocess, sys, time

from mcp_common import Bench

argv = sys.argv[1:]
RECEIPTS = 0
if "--receipts" in argv:
    i = argv.index("--receipts")
    RECEIPTS = int(argv[i + 1])
    del argv[i:i + 2]
SLEEPERS = 0
if "--sleepers" in argv:
    i = argv.index("--sleepers")
    SLEEPERS = int(argv[i + 1])
    del argv[i:i + 2]
SHARDED = "--sharded" in argv
SHELL = "--shell" in argv
args = [a for a in argv if not a.startswith("--")]
DEEP = "--deep" in argv
BIN = os.path.abspath(args[0])
ROUNDS = int(args[1]) if len(args) > 1 else 25
ENTRIES = 48_000


def load():
    return open("/proc/loadavg").read().split()[0]


def fill_receipts(receipts):
    os.makedirs(receipts, mode=0o700)
    made = set()
    for k in range(RECEIPTS):
        key = hashlib.sha256(b"bench-receipt-%d" % k).hexdigest()
        d = os.path.join(receipts, key[:2]) if SHARDED else receipts
        if d not in made:
            os.makedirs(d, mode=0o700, exist_ok=True)
            made.add(d)
        open(os.path.join(d, key + ".json"), "wb").close()
    # Shard directories count as entries of the backing roots too.
    return len(made - {receipts})


def fill(scratch, entries):
    if not DEEP and RECEIPTS:
        for f in range(entries):
            if f % 999 == 0:
                dd = os.path.join(scratch, f"d{f // 999:03}")
                os.makedirs(dd)
            open(os.path.join(dd, f"f{f % 999}"), "wb").close()
        return
    if not DEEP:
        for d in range(ENTRIES // 1000):
            dd = os.path.join(scratch, f"d{d:03}")
            os.makedirs(dd)
            for f in range(999):
                open(os.path.join(dd, f"f{f}"), "wb").close()
        return
    chains = ENTRIES // 780
    dirs = chains * 16
    per_dir = (ENTRIES - dirs) // (chains * 15)
    n = 0
    for c in range(chains):
        p = scratch
        for d in range(1, 17):
            p = os.path.join(p, f"c{c}d{d}")
            os.makedirs(p)
            n += 1
            if d < 16:
                for f in range(per_dir):
                    open(os.path.join(p, f"f{f}"), "wb").close()
                    n += 1
    for f in range(ENTRIES - n):
        open(os.path.join(scratch, f"top{f}"), "wb").close()


b = Bench("winx-mcp-single-")
root, ws, call = b.root, b.ws, b.call
sleepers = []


try:
    scratch = os.path.join(ws, ".winx", "scratch")
    os.makedirs(scratch)
    shards = fill_receipts(os.path.join(root, "data", "winx", "receipts")) if RECEIPTS else 0
    fill(scratch, ENTRIES - RECEIPTS - shards - (ENTRIES - RECEIPTS - shards) // 1000 - 1)
    for _ in range(SLEEPERS):
        sleepers.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL))
    glog = os.environ.get("WINX_BENCH_GUARDIAN_LOG")
    genv = dict(b.env, RUST_LOG="info,winx_release_engine::release=debug,winx_release_guardian=debug") if glog else None
    b.start(BIN, genv, open(glog, "w") if glog else subprocess.DEVNULL)
    session = call("Initialize", {"any_workspace_path": ws, "thread_id": "bench"})["temporary_artifact_dir"]
    roots = [scratch, os.path.join(root, "data", "winx", "executions"), os.path.join(root, "data", "winx", "receipts")]
    if SHELL:
        ran = call("BashCommand", {"thread_id": "bench", "action_json": {"type": "command", "command": "true"}})
        assert ran["status"] == "completed", ran

    def find():
        t = time.perf_counter()
        subprocess.run(["find", *[x for x in roots if os.path.exists(x)], "-printf", "%D %i\n"],
                       stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t

    def release(i):
        files = b.read_helper(session, i)
        t = time.perf_counter()
        res = b.release(files)
        dt = time.perf_counter() - t
        assert res["status"] == "completed", res
        return dt

    load_before = load()
    cold_find = find()
    cold = release(0)
    time.sleep(0.05)  # let the cache's records settle (the racy rule)
    release(1)
    rows = {"find": [], "release": [], "ratio": []}
    for i in range(ROUNDS):
        f = find()
        r = release(i + 2)
        rows["find"].append(f)
        rows["release"].append(r)
        rows["ratio"].append(r / f)
    out = {
        "shape": "deep" if DEEP else "flat",
        "receipts": RECEIPTS,
        "sleepers": SLEEPERS,
        "shell": SHELL,
        "sharded": SHARDED,
        "rounds": ROUNDS,
        "find_ms": round(statistics.median(rows["find"]) * 1000, 2),
        "release_warm_ms": round(statistics.median(rows["release"]) * 1000, 2),
        "release_warm_min_ms": round(min(rows["release"]) * 1000, 2),
        "ratio_warm": round(statistics.median(rows["ratio"]), 4),
        "release_cold_ms": round(cold * 1000, 2),
        "ratio_cold": round(cold / cold_find, 4),
        "load_before": load_before,
        "load_after": load(),
    }
    print(json.dumps(out))
finally:
    b.stop()
    for p in sleepers:
        p.kill()
        p.wait()
