"""What the MCP benches share: a private root with a workspace, and a real
guardian and a real MCP frontend of their own, spoken to with raw JSON-RPC
over stdio.

    b = Bench("winx-mcp-NAME-")  # b.root, b.ws, b.data, b.env, b.sock
                                 # (or Bench(root=DIR): a directory given)
    try:
        b.start(BIN)             # the guardian, then the frontend, initialised
        b.call("Initialize", {...})
    finally:
        b.stop()                 # both ended, the root removed
"""
import json, os, shutil, subprocess, tempfile


class Bench:
    def __init__(self, prefix=None, root=None):
        self.root = root or tempfile.mkdtemp(prefix=prefix)
        self.ws = os.path.join(self.root, "ws")
        os.makedirs(self.ws)
        self.data = os.path.join(self.root, "data")
        self.env = dict(os.environ, XDG_DATA_HOME=self.data, HOME=os.path.join(self.root, "home"))
        self.env.pop("WINX_GUARDIAN_SOCKET", None)
        self.env.pop("XDG_RUNTIME_DIR", None)
        self.sock = os.path.join(self.root, "run", "g.sock")
        self.g = self.m = None
        self.rid = 0

    def start(self, binary, genv=None, gerr=subprocess.DEVNULL):
        """Starts the guardian (environment `genv`, else the bench's; its
        stderr to `gerr`), waits for its ready line, then starts the
        frontend and initialises the MCP session."""
        self.g = subprocess.Popen([binary, "guardian", "--socket", self.sock], env=genv or self.env,
                                  stdout=subprocess.PIPE, stderr=gerr)
        self.g.stdout.readline()
        self.m = subprocess.Popen([binary, "mcp", "--socket", self.sock], env=self.env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "1"}})
        self.rpc("notifications/initialized", notify=True)

    def rpc(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self.rid += 1
            msg["id"] = self.rid
        self.m.stdin.write((json.dumps(msg) + "\n").encode())
        self.m.stdin.flush()
        if notify:
            return None
        while True:
            r = json.loads(self.m.stdout.readline())
            if r.get("id") == self.rid:
                return r

    def call(self, name, a):
        """A tool call's structured content."""
        return self.rpc("tools/call", {"name": name, "arguments": a})["result"]["structuredContent"]

    def read_helper(self, session, i):
        """Writes helper `h<i>.py` (4 KiB, its bytes from `i`) into the
        session directory `session` and reads it with ReadFiles: the files
        of the request that releases it."""
        p = os.path.join(session, f"h{i:04}.py")
        with open(p, "wb") as f:
            f.write(bytes((k * 31 ^ i) & 0xFF for k in range(4096)))
        r = self.call("ReadFiles", {"thread_id": "bench", "file_paths": [p]})["files"][0]
        return [{"file_path": p, "mode": "release_temporary", "expected_revision": r["revision"],
                 "artifact_generation": r["temporary_artifact"]["artifact_generation"]}]

    def release_request(self, files):
        """The EditFiles request that releases `files` in the workspace."""
        return {"thread_id": "bench", "workspace_root": self.ws, "operation": "release_temporary", "files": files}

    def release(self, files):
        """The EditFiles release of `files` in the workspace."""
        return self.call("EditFiles", self.release_request(files))

    def stop(self):
        """Kills the frontend, ends the guardian, removes the root."""
        if self.m:
            self.m.kill()
            self.m.wait()
        if self.g:
            self.g.terminate()
            self.g.wait()
        shutil.rmtree(self.root, ignore_errors=True)
