//! A tool result as MCP carries it: `structuredContent` and the one text
//! block (`--text-result`), shared by whole and streamed replies.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use winx_release_frontend_adapter::{is_error, summary};

/// What the one text block of a tool result holds (`--text-result`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TextResult {
    /// The result object serialised as JSON, the same object as
    /// `structuredContent` (contract section 3): hosts that hand the model
    /// only text still show it revisions, tokens, contents and output.
    #[default]
    Json,
    /// A one-line summary, for hosts known to hand `structuredContent` to
    /// the model.
    Summary,
}

/// Wraps the adapter's result: `structuredContent` is the object itself,
/// `content` one text block (the same object serialised as JSON, or with
/// [`TextResult::Summary`] a one-line summary), and `isError` per the
/// contract.
pub fn to_call_result(tool: &str, value: Value, text: TextResult) -> CallToolResult {
    let text = match text {
        TextResult::Json => value.to_string(),
        TextResult::Summary => summary(tool, &value),
    };
    let content = vec![ContentBlock::text(text)];
    let mut result = if is_error(&value) { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.structured_content = Some(value);
    result
}
