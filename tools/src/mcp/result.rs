//! A tool result as MCP carries it: `structuredContent` and the one text
//! block (`--text-result`), shared by whole and streamed replies.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;
use winx_release_mcp_tools::{is_error, summary};

use super::render::render;

/// What the one text block of a tool result holds (`--text-result`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TextResult {
    /// A rendering for a language model (contract section 3): status and
    /// code, the message, every field on a labelled line, contents and
    /// output unescaped in fences ([`super::render`]). Hosts that hand the
    /// model only text still show it revisions, tokens, contents and
    /// output.
    #[default]
    Text,
    /// The result object serialised as JSON, the same object as
    /// `structuredContent` (the MCP specification's backwards-compatibility
    /// advice).
    Json,
    /// A one-line summary, for hosts known to hand `structuredContent` to
    /// the model.
    Summary,
}

/// Wraps the adapter's result: `structuredContent` is the object itself,
/// `content` one text block (the rendering, the object serialised as
/// JSON, or a one-line summary), and `isError` per the contract.
pub fn to_call_result(tool: &str, value: Value, text: TextResult) -> CallToolResult {
    let text = match text {
        TextResult::Text => render(tool, &value),
        TextResult::Json => value.to_string(),
        TextResult::Summary => summary(tool, &value),
    };
    let content = vec![ContentBlock::text(text)];
    let mut result = if is_error(&value) { CallToolResult::error(content) } else { CallToolResult::success(content) };
    result.structured_content = Some(value);
    result
}
