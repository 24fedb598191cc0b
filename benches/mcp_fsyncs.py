#!/usr/bin/env python3
"""Counts and times the fsyncs of one warm release end to end (the guardian
and the MCP frontend: journal, capture, directories, receipt), with
`strace -f -y -T -e trace=fsync,fdatasync,sync_file_range,syncfs,sync`
attached to both for ROUNDS warm releases of one 4 KiB helper (after
three unwatched ones). Each call is named by what its descriptor is
(`strace -y` prints the path) and the script prints, per kind: calls per
release and the median and minimum time of one call (`-T`: the system
call's own time, from entry to exit).

Usage: benches/mcp_fsyncs.py BIN [ROUNDS]
"""
import os, re, statistics, subprocess, sys, time

from mcp_common import Bench

BIN = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 20

b = Bench("winx-mcp-fsyncs-")
root, ws, data, call = b.root, b.ws, b.data, b.call
st = None


def kind(path, session):
    """What a synced descriptor is, from its path."""
    w = os.path.join(data, "winx")
    if path.startswith(os.path.join(w, "journal") + "/"):
        return "journal file (fdatasync)"
    if path == os.path.join(w, "journal"):
        return "D/journal directory"
    r = os.path.join(w, "receipts")
    if path == r:
        return "D/receipts directory (a new shard's name)"
    if path.startswith(r + "/") and "/" in path[len(r) + 1:]:
        return "receipt file"
    if path.startswith(r + "/"):
        return "receipt shard directory D/receipts/<hh>"
    if path == session:
        return "session directory"
    if path.startswith(session):
        return "in the session directory (quarantine)"
    return path.replace(root, "ROOT")[:60]


try:
    b.start(BIN)
    session = call("Initialize", {"any_workspace_path": ws, "thread_id": "bench"})["temporary_artifact_dir"]
    session = os.path.realpath(session)

    def release(i):
        res = b.release(b.read_helper(session, i))
        assert res["status"] == "completed", res

    for i in range(3):
        release(i)
    log = os.path.join(root, "strace.log")
    st = subprocess.Popen(["strace", "-f", "-y", "-T", "-qq", "-o", log, "-e",
                           "trace=fsync,fdatasync,sync_file_range,syncfs,sync", "-p", str(b.g.pid), "-p", str(b.m.pid)],
                          stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # strace attached to every thread
    load_before = open("/proc/loadavg").read().split()[0]
    for i in range(ROUNDS):
        release(100 + i)
    time.sleep(0.2)
    st.terminate()
    st.wait()
    st = None
    calls = {}
    line_re = re.compile(r"^\d+\s+(\w+)\((\d+)<([^>]*)>.*<([0-9.]+)>\s*$")
    for line in open(log):
        mm = line_re.match(line.strip())
        if not mm:
            continue
        name, _, path, secs = mm.groups()
        calls.setdefault((name, kind(path, session)), []).append(float(secs))
    print(f"{ROUNDS} warm releases of one 4 KiB helper, load before "
          f"{load_before}, after {open('/proc/loadavg').read().split()[0]}")
    total = 0
    for (name, k), ts in sorted(calls.items(), key=lambda kv: -len(kv[1])):
        total += len(ts)
        print(f"{name:10} {k:45} {len(ts) / ROUNDS:5.2f} per release; median {statistics.median(ts) * 1e3:.3f} ms,"
              f" min {min(ts) * 1e3:.3f} ms")
    print(f"total {total / ROUNDS:.2f} per release")
finally:
    if st:
        st.terminate()
        st.wait()
    b.stop()
