//! The four tools as `tools/list` returns them.
//!
//! Each [`Tool`] of the adapter carries its name, description, input and
//! output schemas and annotation hints; this module makes them rmcp's.

use std::sync::Arc;

use rmcp::model::ToolAnnotations;
use serde_json::Value;
use winx_release_mcp_tools::Tool;

/// MCP hints of a tool (hints only: the frontend enforces its own policy).
fn annotations(tool: Tool) -> ToolAnnotations {
    let h = tool.hints();
    ToolAnnotations::from_raw(None, h.read_only, h.destructive, h.idempotent, h.open_world)
}

/// The tools, in the contract's order.
pub fn tool_list() -> Vec<rmcp::model::Tool> {
    Tool::ALL
        .into_iter()
        .map(|t| {
            let object = |schema: Value| match schema {
                Value::Object(m) => Arc::new(m),
                other => panic!("a schema of {t} is not an object: {other}"),
            };
            let mut tool = rmcp::model::Tool::new(t.name(), t.description(), object(t.input_schema()))
                .with_annotations(annotations(t));
            tool.output_schema = Some(object(t.output_schema()));
            tool
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn four_tools_with_closed_object_schemas() {
        let tools = tool_list();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["Initialize", "ReadFiles", "EditFiles", "BashCommand"]);
        for t in &tools {
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
            assert_eq!(t.input_schema.get("additionalProperties"), Some(&json!(false)), "{}", t.name);
            assert!(t.input_schema.get("required").is_some_and(Value::is_array), "{}", t.name);
            assert!(t.description.as_deref().is_some_and(|d| !d.is_empty()), "{}", t.name);
            let out = t.output_schema.as_ref().expect("an output schema");
            assert_eq!(out.get("type"), Some(&json!("object")), "{}", t.name);
            assert_eq!(out.get("required"), Some(&json!(["status"])), "{}", t.name);
        }
        let read = tools.iter().find(|t| t.name == "ReadFiles").unwrap();
        assert_eq!(read.annotations.as_ref().and_then(|a| a.read_only_hint), Some(true));
    }

    /// What `tools/list` says, pinned byte for byte (names, descriptions,
    /// schemas, annotations): `tools-list.json` beside this file. A
    /// deliberate change: `UPDATE_TOOL_LIST=1 cargo test -p winx-release-tools tools_list`,
    /// and commit the file.
    #[test]
    fn tools_list_is_pinned() {
        let got = serde_json::to_string_pretty(&tool_list()).unwrap() + "\n";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/mcp/tools-list.json");
        if std::env::var_os("UPDATE_TOOL_LIST").is_some() {
            std::fs::write(path, &got).unwrap();
        }
        let want = std::fs::read_to_string(path).unwrap_or_default();
        assert!(got == want, "tools/list changed: {path} differs (UPDATE_TOOL_LIST=1 to accept)\n{got}");
    }
}
