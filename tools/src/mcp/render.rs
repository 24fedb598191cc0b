//! The text block a language model reads: a tool result rendered as
//! labelled lines (contract section 3).
//!
//! Status and code come first (`ReadFiles: completed`, `EditFiles: denied
//! (read_required)`), then the message, then every other field on a line
//! of its own, `label: value`, labels spelled as the JSON keys (nested
//! objects flattened, `temporary_release.available: true`). Each `files`
//! entry is a block that starts with `file_path:`; a helper's token is on
//! `artifact_generation:`; a file's content and a command's output follow
//! unescaped in a fence of backticks one longer than the longest run of
//! backticks inside (at least three), and binary or truncated content is
//! said in words. `failed_files` entries are `failed: PATH (CODE)`.
//!
//! A streamed `ReadFiles` ([`super::stream`]) writes the same blocks as
//! the files come, so its status line comes last: [`stream_head`], then
//! [`write_read_file`] per file, then [`stream_tail`].
//!
//! Everything is written to an [`io::Write`], so that the streamed reply
//! escapes each content once, on its way into the JSON string of the text
//! block, with no copy of it in between.

use std::io::{self, Write};

use serde_json::{Map, Value};
use winx_release_mcp_tools::tool::{FilesBlock, Tool};

use super::escape::{word_at, word_has};

/// Keys rendered by the status line or a block of their own.
const OWN_LINES: &[&str] = &["status", "errorCode", "message", "files", "failed_files", "content", "output"];

/// The rendering of `result`, a result of `tool`.
pub fn render(tool: &str, result: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    // Writing to a Vec does not fail.
    let _ = write_result(tool, result, &mut out);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Writes the rendering of `result` (a result of `tool`) to `w`.
pub fn write_result(tool: &str, result: &Value, w: &mut dyn Write) -> io::Result<()> {
    status_line(tool, result, w)?;
    if let Some(m) = result.get("message").and_then(Value::as_str) {
        writeln!(w, "message: {m}")?;
    }
    if let Value::Object(map) = result {
        fields(map, "", OWN_LINES, w)?;
    }
    if let Some(out) = result.get("output").and_then(Value::as_str) {
        writeln!(w, "output:")?;
        fenced(out, w)?;
    }
    if let Some(files) = result.get("files").and_then(Value::as_array) {
        for f in files {
            match Tool::from_name(tool).map(Tool::files_block) {
                Some(FilesBlock::Read) => write_read_file(f, w)?,
                _ => write_entry(f, w)?,
            }
        }
    }
    if let Some(failed) = result.get("failed_files").and_then(Value::as_array) {
        write_failed(failed, w)?;
    }
    Ok(())
}

/// `TOOL: STATUS`, with ` (CODE)` when the result carries an `errorCode`.
fn status_line(tool: &str, result: &Value, w: &mut dyn Write) -> io::Result<()> {
    let status = result.get("status").and_then(Value::as_str).unwrap_or("unknown");
    match result.get("errorCode").and_then(Value::as_str) {
        Some(code) => writeln!(w, "{tool}: {status} ({code})"),
        None => writeln!(w, "{tool}: {status}"),
    }
}

/// The first line of a streamed `ReadFiles` text block: its status comes
/// last.
pub fn stream_head(w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "ReadFiles (status at the end)")
}

/// The last lines of a streamed `ReadFiles` text block: the failures and
/// the status line, as `result` (`status`, `failed_files`, maybe
/// `errorCode`) has them.
pub fn stream_tail(result: &Value, w: &mut dyn Write) -> io::Result<()> {
    if let Some(failed) = result.get("failed_files").and_then(Value::as_array) {
        write_failed(failed, w)?;
    }
    writeln!(w)?;
    status_line("ReadFiles", result, w)
}

fn write_failed(failed: &[Value], w: &mut dyn Write) -> io::Result<()> {
    for f in failed {
        let s = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("");
        write!(w, "\nfailed: {} ({})", s("file_path"), s("errorCode"))?;
        if !s("message").is_empty() {
            write!(w, " {}", s("message"))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// One `ReadFiles` entry: path, revision, token, size, then its content.
pub fn write_read_file(f: &Value, w: &mut dyn Write) -> io::Result<()> {
    write_read_file_with(f, w, |text, w| w.write_all(text.as_bytes()))
}

/// [`write_read_file`], with the content's bytes inside its fence written
/// by `body` (given the content and `w`): the streamed reply writes there
/// the characters it escaped once for both blocks.
pub fn write_read_file_with<W: Write + ?Sized>(
    f: &Value,
    w: &mut W,
    body: impl FnOnce(&str, &mut W) -> io::Result<()>,
) -> io::Result<()> {
    writeln!(w)?;
    let s = |k: &str| f.get(k).and_then(Value::as_str);
    writeln!(w, "file_path: {}", s("file_path").unwrap_or(""))?;
    if let Some(r) = s("revision") {
        writeln!(w, "revision: {r}")?;
    }
    if let Some(t) = f.get("temporary_artifact").and_then(|t| t.get("artifact_generation")).and_then(Value::as_str) {
        writeln!(w, "artifact_generation: {t}")?;
    }
    let size = f.get("size").and_then(Value::as_u64);
    if let Some(n) = size {
        writeln!(w, "size: {n}")?;
    }
    let flag = |k: &str| f.get(k).and_then(Value::as_bool) == Some(true);
    match s("content") {
        _ if flag("binary") => writeln!(w, "content: binary ({} bytes, not shown)", size.unwrap_or(0)),
        Some(text) => {
            if flag("truncated") {
                writeln!(w, "content: truncated, the first {} of {} bytes:", text.len(), size.unwrap_or(0))?;
            } else {
                writeln!(w, "content:")?;
            }
            fenced_with(text, w, body)
        }
        None => writeln!(w, "content: none"),
    }
}

/// Any other `files` entry (a release target, a write): `file_path` first,
/// then its other fields.
fn write_entry(f: &Value, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "file_path: {}", f.get("file_path").and_then(Value::as_str).unwrap_or(""))?;
    if let Value::Object(map) = f {
        fields(map, "", &["file_path"], w)?;
    }
    Ok(())
}

/// Every member of `map` but `skip`, one `label: value` line each, nested
/// objects flattened with dotted labels. A `null` is written `null`.
fn fields(map: &Map<String, Value>, prefix: &str, skip: &[&str], w: &mut dyn Write) -> io::Result<()> {
    for (k, v) in map {
        if prefix.is_empty() && skip.contains(&k.as_str()) {
            continue;
        }
        match v {
            Value::Object(inner) => fields(inner, &format!("{prefix}{k}."), &[], w)?,
            Value::String(s) => writeln!(w, "{prefix}{k}: {s}")?,
            Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                let parts: Vec<String> = items.iter().map(scalar).collect();
                writeln!(w, "{prefix}{k}: [{}]", parts.join(", "))?;
            }
            other => writeln!(w, "{prefix}{k}: {other}")?,
        }
    }
    Ok(())
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Writes `text` in a fence of backticks one longer than its longest run
/// (at least three), the closing fence on a line of its own.
pub fn fenced(text: &str, w: &mut dyn Write) -> io::Result<()> {
    fenced_with(text, w, |text, w| w.write_all(text.as_bytes()))
}

/// [`fenced`], `text` itself written by `body`.
fn fenced_with<W: Write + ?Sized>(
    text: &str,
    w: &mut W,
    body: impl FnOnce(&str, &mut W) -> io::Result<()>,
) -> io::Result<()> {
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    writeln!(w, "{fence}")?;
    body(text, w)?;
    if !text.is_empty() && !text.ends_with('\n') {
        writeln!(w)?;
    }
    writeln!(w, "{fence}")
}

/// The longest run of backticks in `text`, passing over eight bytes at a
/// time where no run goes on and none starts.
fn longest_backtick_run(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut longest, mut run, mut i) = (0, 0, 0);
    while i < bytes.len() {
        if run == 0 && word_at(bytes, i).is_some_and(|x| !word_has(x, b'`')) {
            i += 8;
            continue;
        }
        if bytes[i] == b'`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
        i += 1;
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The labelled value of `label` on the first line that has it.
    fn label<'a>(text: &'a str, label: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(label).and_then(|r| r.strip_prefix(": ")))
    }

    #[test]
    fn a_read_shows_status_tokens_and_the_content_unescaped() {
        let v = json!({"status": "partial", "files": [{"file_path": "/s/h.py", "revision": "sha256:ab", "size": 12,
            "content": "print(\"a\")\n```\n", "binary": false, "truncated": false,
            "temporary_artifact": {"artifact_generation": "tok1", "in_use": null, "releasable": null}}],
            "failed_files": [{"file_path": "/s/x", "errorCode": "not_found"}]});
        let t = render("ReadFiles", &v);
        assert!(t.starts_with("ReadFiles: partial\n"), "{t}");
        assert_eq!(label(&t, "revision"), Some("sha256:ab"));
        assert_eq!(label(&t, "artifact_generation"), Some("tok1"));
        assert_eq!(label(&t, "size"), Some("12"));
        // The content as it is, in a fence longer than its own run of three.
        assert!(t.contains("content:\n````\nprint(\"a\")\n```\n````\n"), "{t}");
        assert!(t.contains("failed: /s/x (not_found)"), "{t}");
    }

    #[test]
    fn binary_and_truncated_are_said_in_words() {
        let v = json!({"status": "completed", "failed_files": [], "files": [
            {"file_path": "/b", "revision": "sha256:1", "size": 9, "content": null, "binary": true, "truncated": false},
            {"file_path": "/t", "revision": "sha256:2", "size": 300000, "content": "abc", "binary": false,
             "truncated": true}]});
        let t = render("ReadFiles", &v);
        assert!(t.contains("content: binary (9 bytes, not shown)"), "{t}");
        assert!(t.contains("content: truncated, the first 3 of 300000 bytes:\n```\nabc\n```\n"), "{t}");
    }

    #[test]
    fn a_release_and_a_command_show_every_field() {
        let v = json!({"status": "denied", "errorCode": "execution_active", "message": "a command runs",
            "operation": "release_temporary", "replayed": false, "bytes_reclaimed": 0,
            "files": [{"file_path": "/s/h", "outcome": "denied", "reason": "execution_active", "bytes_reclaimed": 0}]});
        let t = render("EditFiles", &v);
        assert!(t.starts_with("EditFiles: denied (execution_active)\nmessage: a command runs\n"), "{t}");
        assert_eq!(label(&t, "outcome"), Some("denied"));
        assert_eq!(label(&t, "reason"), Some("execution_active"));
        assert_eq!(label(&t, "replayed"), Some("false"));
        let c = json!({"status": "completed", "command_id": "c1", "exit_code": 3, "output": "hi\n", "output_truncated": false});
        let t = render("BashCommand", &c);
        assert!(t.starts_with("BashCommand: completed\n"), "{t}");
        assert_eq!(label(&t, "exit_code"), Some("3"));
        assert!(t.contains("output:\n```\nhi\n```\n"), "{t}");
        let i = json!({"status": "completed", "temporary_release": {"available": false, "reason": "owner_unavailable",
            "detail": "start one"}, "liveness": null});
        let t = render("Initialize", &i);
        assert_eq!(label(&t, "temporary_release.available"), Some("false"));
        assert_eq!(label(&t, "temporary_release.detail"), Some("start one"));
        assert_eq!(label(&t, "liveness"), Some("null"));
    }

    #[test]
    fn fences_outgrow_the_longest_run() {
        for (text, fence) in [
            ("", "```"),
            ("a`b``c", "```"),
            ("x````y", "`````"),
            ("0123456789abcdef````", "`````"),
            ("0123456`````89abcdef", "``````"),
            ("01234567```89abcdef`", "````"),
        ] {
            let mut out = Vec::new();
            fenced(text, &mut out).unwrap();
            let out = String::from_utf8(out).unwrap();
            assert!(out.starts_with(&format!("{fence}\n")) && out.ends_with(&format!("\n{fence}\n")), "{out:?}");
        }
    }
}
