//! The MCP tool definitions: descriptions and input JSON schemas of each
//! [`Tool`], and the list a server shell serves.

use serde_json::Value;

use crate::tool::Tool;

/// One tool as the MCP server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    /// The tool name.
    pub name: &'static str,
    /// What it does.
    pub description: &'static str,
    /// The JSON schema of its arguments (draft 2020-12): every property has
    /// a `description`, and an optional one its `default`.
    pub input_schema: Value,
    /// The JSON schema of its result, the `structuredContent` object
    /// (MCP 2025-06-18 `outputSchema`; draft 2020-12). Results may carry
    /// members beyond those listed.
    pub output_schema: Value,
}

/// The four tools of the contract's section 3, in its order.
pub fn tool_specs() -> Vec<ToolSpec> {
    Tool::ALL
        .into_iter()
        .map(|t| ToolSpec {
            name: t.name(),
            description: t.description(),
            input_schema: t.input_schema(),
            output_schema: t.output_schema(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn four_tools() {
        let names: Vec<_> = tool_specs().iter().map(|t| t.name).collect();
        assert_eq!(names, ["Initialize", "ReadFiles", "EditFiles", "BashCommand"]);
        assert!(tool_specs().iter().all(|t| t.input_schema["type"] == "object"));
        assert!(tool_specs().iter().all(|t| t.output_schema["type"] == "object"));
    }

    /// Every property of `schema` (inputs and outputs, nested ones and
    /// array items included): its path, when it has no description.
    fn undescribed(schema: &Value, path: &str, out: &mut Vec<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{path}.{k}");
                if v.get("description").and_then(Value::as_str).is_none_or(str::is_empty) {
                    out.push(p.clone());
                }
                undescribed(v, &p, out);
            }
        }
        if let Some(items) = schema.get("items") {
            undescribed(items, &format!("{path}[]"), out);
        }
        for key in ["anyOf", "oneOf"] {
            for (i, alt) in schema.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
                undescribed(alt, &format!("{path}|{i}"), out);
            }
        }
    }

    #[test]
    fn every_property_has_a_description() {
        let mut missing = Vec::new();
        for t in tool_specs() {
            undescribed(&t.input_schema, &format!("{}.input", t.name), &mut missing);
            undescribed(&t.output_schema, &format!("{}.output", t.name), &mut missing);
        }
        assert!(missing.is_empty(), "properties without a description: {missing:?}");
    }

    #[test]
    fn optional_inputs_with_a_default_say_it() {
        let specs = tool_specs();
        let prop =
            |tool: &str, p: &str| specs.iter().find(|t| t.name == tool).unwrap().input_schema["properties"][p].clone();
        assert_eq!(prop("BashCommand", "wait_for_seconds")["default"], json!(5.0));
        assert_eq!(prop("BashCommand", "is_background")["default"], json!(false));
        assert_eq!(prop("BashCommand", "status_check")["default"], json!(false));
        assert_eq!(prop("Initialize", "mode_name")["default"], json!("wcgw"));
        assert_eq!(prop("Initialize", "thread_id")["default"], json!(""));
        assert_eq!(prop("EditFiles", "operation")["default"], json!("edit"));
        // Every optional scalar input names its default, or says in its
        // description what its absence means.
        for t in &specs {
            let required: Vec<&str> =
                t.input_schema["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            for (k, v) in t.input_schema["properties"].as_object().unwrap() {
                let optional = !required.contains(&k.as_str());
                let says = v.get("default").is_some()
                    || v["description"].as_str().is_some_and(|d| {
                        ["Absent by default", "required unless", "Only with", "With status_check"]
                            .iter()
                            .any(|w| d.contains(w))
                    });
                assert!(!optional || says, "{}.{k} is optional and says nothing of its default", t.name);
            }
        }
    }
}
