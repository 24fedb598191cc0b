//! The MCP server handler: `tools/list` and `tools/call` over the adapter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam, ErrorCode, Implementation,
    ListToolsResult, PaginatedRequestParams, RequestId, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use winx_release_engine::WireCode;
use winx_release_kernel::sys::lock;
use winx_release_mcp_tools::Frontend;

use super::result::{to_call_result, TextResult};
use super::stream;
use super::tools::tool_list;
use super::transport::Streams;

/// The MCP server: a thin layer over a [`Frontend`].
#[derive(Clone)]
pub struct WinxServer {
    frontend: Arc<Frontend>,
    tools: Arc<Vec<Tool>>,
    /// Where `ReadFiles` replies are streamed from; `None` serialises every
    /// result whole.
    streams: Option<Streams>,
    text: TextResult,
    /// The stop flag of every streamed `ReadFiles` still reading, by
    /// request id.
    reads: Arc<Mutex<HashMap<RequestId, Arc<AtomicBool>>>>,
}

impl WinxServer {
    /// A server over `frontend` whose results are serialised whole.
    pub fn new(frontend: Arc<Frontend>, text: TextResult) -> WinxServer {
        WinxServer { frontend, tools: Arc::new(tool_list()), streams: None, text, reads: Arc::default() }
    }

    /// A server over `frontend` that streams `ReadFiles` replies through
    /// the transport that shares `streams`.
    pub fn streaming(frontend: Arc<Frontend>, streams: Streams, text: TextResult) -> WinxServer {
        WinxServer { streams: Some(streams), ..WinxServer::new(frontend, text) }
    }
}

impl ServerHandler for WinxServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("winx-release", env!("CARGO_PKG_VERSION")).with_title("winx-release frontend"),
            )
            .with_instructions(
                "Call Initialize first. Helpers written to $WINX_TEMP_DIR can be released explicitly: read each \
                 with ReadFiles, then call EditFiles with operation release_temporary, copying revision and \
                 temporary_artifact.artifact_generation into expected_revision and artifact_generation.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.into_owned();
        if !self.tools.iter().any(|t| t.name == name) {
            return Err(McpError::new(ErrorCode::INVALID_PARAMS, format!("unknown tool: {name}"), None));
        }
        // The raw argument object goes to the adapter as it came: a malformed
        // shape is its `invalid_input` result, not a protocol error.
        let args = request.arguments.map(Value::Object).unwrap_or_else(|| Value::Object(Default::default()));
        tracing::debug!(tool = %name, "tool call");
        if let (Some(streams), Some(winx_release_mcp_tools::Tool::ReadFiles)) =
            (&self.streams, winx_release_mcp_tools::Tool::from_name(&name))
        {
            // The reply is written by the stream as the helpers are read;
            // this placeholder only carries the protocol's own members.
            let (tx, rx) = std::sync::mpsc::channel();
            // Set by the client's cancellation (`on_cancelled`) or once the
            // reply went out (the writer): the reading then stops.
            let stop = Arc::new(AtomicBool::new(false));
            lock(&self.reads).insert(context.id.clone(), stop.clone());
            let writer = stream::writer(rx, stream::requested_paths(&args), self.text, stop.clone());
            streams.insert(context.id.clone(), writer);
            let (frontend, reads, id) = (self.frontend.clone(), self.reads.clone(), context.id);
            tokio::task::spawn_blocking(move || {
                stream::read(&frontend, &args, &stop, &tx);
                lock(&reads).remove(&id);
            });
            return Ok(CallToolResult::success(vec![]).into());
        }
        let frontend = self.frontend.clone();
        let tool = name.clone();
        let value = match tokio::task::spawn_blocking(move || frontend.call(&tool, args)).await {
            Ok(Some(v)) => v,
            Ok(None) => {
                return Err(McpError::new(ErrorCode::INVALID_PARAMS, format!("unknown tool: {name}"), None));
            }
            Err(e) => {
                // A panic inside the adapter: the call failed, the server goes on.
                tracing::error!(tool = %name, error = %e, "tool task failed");
                json!({"status": "failed", "errorCode": WireCode::InternalError.as_str(),
                    "message": format!("{name} failed inside the frontend")})
            }
        };
        Ok(to_call_result(&name, value, self.text).into())
    }

    /// A client's `notifications/cancelled`: a `ReadFiles` still reading
    /// stops issuing reads (each file not read by then is reported
    /// `io_error` in a reply the client no longer waits for). Other tools
    /// run to their end: a release or a command is not stopped halfway.
    async fn on_cancelled(&self, notification: CancelledNotificationParam, _context: NotificationContext<RoleServer>) {
        let Some(id) = notification.request_id else { return };
        if let Some(stop) = lock(&self.reads).get(&id) {
            tracing::debug!(%id, "ReadFiles cancelled by the client");
            stop.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_block_is_the_result_object() {
        for v in [
            json!({"status": "completed", "command_id": "c1", "exit_code": 0, "output": "hi\n\"quoted\""}),
            json!({"status": "failed", "errorCode": "io_error", "files": [{"file_path": "/a", "outcome": "preserved",
                "quarantine_path": "/q/a"}]}),
            json!({"status": "denied", "errorCode": "read_required", "files": []}),
        ] {
            let r = to_call_result("EditFiles", v.clone(), TextResult::Json);
            assert_eq!(r.content.len(), 1);
            let text = &r.content[0].as_text().unwrap().text;
            let parsed: Value = serde_json::from_str(text).expect("the text block is JSON");
            assert_eq!(parsed, v);
            assert_eq!(r.structured_content.as_ref(), Some(&v));
        }
    }

    #[test]
    fn results_carry_structured_content_and_one_text_block() {
        let ok = to_call_result(
            "BashCommand",
            json!({"status": "completed", "command_id": "c1", "exit_code": 0}),
            TextResult::Summary,
        );
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.structured_content.as_ref().unwrap()["command_id"], "c1");
        assert_eq!(ok.content.len(), 1);
        for status in ["denied", "invalid_input", "failed"] {
            for text in [TextResult::Summary, TextResult::Json] {
                let r = to_call_result(
                    "EditFiles",
                    json!({"status": status, "errorCode": "read_required", "files": []}),
                    text,
                );
                assert_eq!(r.is_error, Some(true), "{status}");
                assert_eq!(r.content.len(), 1);
                assert!(r.content[0].as_text().unwrap().text.contains(status));
            }
        }
        let partial = to_call_result("EditFiles", json!({"status": "partial", "files": []}), TextResult::Json);
        assert_eq!(partial.is_error, Some(false));
        // `--text-result summary`: the text block is a summary, the content
        // is not serialised twice.
        let content = "x".repeat(10_000);
        let read = to_call_result(
            "ReadFiles",
            json!({"status": "completed", "files": [{"file_path": "/a", "content": content}], "failed_files": []}),
            TextResult::Summary,
        );
        let text = &read.content[0].as_text().unwrap().text;
        assert!(text.len() < 200 && !text.contains("xxxx"), "{text}");
        assert_eq!(
            read.structured_content.as_ref().unwrap()["files"][0]["content"].as_str().map(str::len),
            Some(10_000)
        );
    }
}
