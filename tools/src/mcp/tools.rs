//! The four tools as `tools/list` returns them.
//!
//! Names, descriptions, input and output schemas come from the adapter
//! (`winx_release_mcp_tools::tool_specs`), the single source of the
//! argument shapes; this module adds the MCP tool annotations.

use std::sync::Arc;

use rmcp::model::{Tool, ToolAnnotations};
use serde_json::Value;
use winx_release_mcp_tools::tool_specs;

/// MCP hints of a tool (hints only: the frontend enforces its own policy).
fn annotations(name: &str) -> ToolAnnotations {
    match name {
        "ReadFiles" => ToolAnnotations::new().read_only(true).open_world(false),
        "Initialize" => ToolAnnotations::new().read_only(false).destructive(false).idempotent(true).open_world(false),
        "EditFiles" => ToolAnnotations::new().read_only(false).destructive(true).idempotent(true).open_world(false),
        _ => ToolAnnotations::new().read_only(false).destructive(true),
    }
}

/// The tools, in the contract's order.
pub fn tool_list() -> Vec<Tool> {
    tool_specs()
        .into_iter()
        .map(|spec| {
            let object = |schema: Value| match schema {
                Value::Object(m) => Arc::new(m),
                other => panic!("a schema of {} is not an object: {other}", spec.name),
            };
            let mut tool = Tool::new(spec.name, spec.description, object(spec.input_schema))
                .with_annotations(annotations(spec.name));
            tool.output_schema = Some(object(spec.output_schema));
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
