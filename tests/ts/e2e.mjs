// End to end through the official MCP TypeScript SDK, reading TEXT content
// only (as a host that hands the model only the text block would), with
// `--text-result json` (the text block is the result object as JSON):
// Initialize -> BashCommand writes a helper -> ReadFiles -> EditFiles
// release with the revision and token taken from the text -> the same
// request again (replayed). The SDK also validates every structuredContent
// against the tool's outputSchema. Run by tests/mcp_ts_sdk.rs:
//   node e2e.mjs BIN SOCKET WORKSPACE   (environment: XDG_DATA_HOME, HOME)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, socket, workspace] = process.argv.slice(2);
const env = { PATH: process.env.PATH, HOME: process.env.HOME, XDG_DATA_HOME: process.env.XDG_DATA_HOME };
const transport = new StdioClientTransport({ command: bin, args: ["mcp", "--socket", socket, "--text-result", "json"], env, stderr: "inherit" });
const client = new Client({ name: "winx-ts-e2e", version: "1.0.0" });
await client.connect(transport);

function fail(msg) {
  console.error("FAIL: " + msg);
  process.exit(1);
}

// The first text block, parsed: the only thing read from each result.
async function call(name, args) {
  const r = await client.callTool({ name, arguments: args });
  const block = r.content[0];
  if (!block || block.type !== "text") fail(`${name}: no text block first: ${JSON.stringify(r.content)}`);
  return { v: JSON.parse(block.text), isError: r.isError === true };
}

const tools = await client.listTools();
for (const t of tools.tools) if (!t.outputSchema) fail(`${t.name} has no outputSchema`);

const thread = "ts-sdk-thread";
const init = (await call("Initialize", { any_workspace_path: workspace, thread_id: thread })).v;
if (init.status !== "completed" || init.temporary_release.available !== true) fail(JSON.stringify(init));
const helper = init.temporary_artifact_dir + "/h.txt";

const bash = (await call("BashCommand", { thread_id: thread, command: 'printf hello > "$WINX_TEMP_DIR/h.txt"' })).v;
if (bash.exit_code !== 0) fail(JSON.stringify(bash));

const read = (await call("ReadFiles", { thread_id: thread, file_paths: [helper] })).v;
const f = read.files[0];
if (f.content !== "hello") fail(JSON.stringify(read));
const request = {
  thread_id: thread,
  workspace_root: init.workspace_root,
  operation: "release_temporary",
  files: [{
    file_path: helper,
    mode: "release_temporary",
    expected_revision: f.revision,
    artifact_generation: f.temporary_artifact.artifact_generation,
  }],
};
const done = await call("EditFiles", request);
if (done.isError || done.v.status !== "completed" || done.v.files[0].outcome !== "released") fail(JSON.stringify(done));
const again = await call("EditFiles", request);
if (again.v.replayed !== true || again.v.receipt_id !== done.v.receipt_id) fail(JSON.stringify(again));

// A refusal is read from the text too (isError: true).
const denied = await call("EditFiles", { ...request, files: [{ ...request.files[0], artifact_generation: "g1.00" }] });
if (!denied.isError || denied.v.status !== "denied") fail(JSON.stringify(denied));

await client.close();
console.log(JSON.stringify({ ok: true, receipt_id: done.v.receipt_id, bytes_reclaimed: done.v.bytes_reclaimed }));
