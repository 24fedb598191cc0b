//! The line-level pieces of `public_api`'s reader: literals and comments
//! stripped, names, visibility, `impl` types, module files and `use` trees.

use std::path::{Path, PathBuf};
pub(crate) const ITEM_KINDS: &[&str] =
    &["fn", "struct", "enum", "trait", "const", "static", "type", "unsafe fn", "async fn"];
/// The `cfg` of every platform but Linux (and Linux with `--cfg winx_foreign`).
pub(crate) const OFF_LINUX: &str = "#[cfg(not(all(target_os = \"linux\", not(winx_foreign))))]";
pub(crate) const MEMBER_KINDS: &[&str] = &["fn", "const", "unsafe fn", "async fn"];

/// Removes string and char literals and `//` comments so braces inside them
/// do not count.
pub(crate) fn strip(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    if d == '\\' {
                        chars.next();
                    } else if d == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            '\'' => {
                // A char literal ('x', '\n', '{'); a lifetime has no closing quote soon.
                let rest: String = chars.clone().take(4).collect();
                if let Some(end) = rest.find('\'') {
                    for _ in 0..=end {
                        chars.next();
                    }
                    out.push_str("' '");
                } else {
                    out.push(c);
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

pub(crate) fn name_after(rest: &str) -> String {
    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The visibility an item line starts with, and the rest of the line.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Vis {
    /// `pub`: visible wherever its module is.
    Public,
    /// `pub(crate)`, `pub(super)`, `pub(in …)` or nothing.
    Private,
}

pub(crate) fn visibility(t: &str) -> (Vis, &str) {
    let (vis, rest) = if let Some(rest) = t.strip_prefix("pub ") {
        (Vis::Public, rest.trim_start())
    } else if t.starts_with("pub(") {
        let end = t.find(')').map_or(t.len(), |i| i + 1);
        (Vis::Private, t[end..].trim_start())
    } else {
        (Vis::Private, t)
    };
    // A `const fn` is a function.
    match rest.strip_prefix("const ") {
        Some(r) if ["fn ", "unsafe fn ", "async fn "].iter().any(|k| r.starts_with(k)) => (vis, r),
        _ => (vis, rest),
    }
}

/// The type an `impl` line is for, as written: `impl<T> a::Foo<T> {` ->
/// `["a", "Foo"]`; trait impls give `None` (their methods are the trait's).
pub(crate) fn impl_type(line: &str) -> Option<Vec<String>> {
    let l = line.trim_start();
    let rest = l.strip_prefix("impl")?;
    if !(rest.starts_with(' ') || rest.starts_with('<')) || l.contains(" for ") {
        return None;
    }
    let mut rest = rest.trim_start();
    if rest.starts_with('<') {
        let mut depth = 0;
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = rest[end..].trim_start();
    }
    let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    let path: Vec<String> = path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
    (!path.is_empty()).then_some(path)
}

pub(crate) fn module_file(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return Some((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    nested.exists().then(|| (nested, dir.join(name)))
}

/// Splits a use tree (`a::{b, c::d as e, f::*}`) into its leaves.
pub(crate) fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut tokens = Vec::new();
    let mut chars = tree.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut word = c.to_string();
            while let Some(&d) = chars.peek().filter(|d| d.is_alphanumeric() || **d == '_') {
                word.push(d);
                chars.next();
            }
            tokens.push(word);
        } else if c == ':' {
            chars.next();
            tokens.push("::".into());
        } else if "{},*".contains(c) {
            tokens.push(c.to_string());
        }
    }
    let mut i = 0;
    let mut out = Vec::new();
    use_tree(&tokens, &mut i, Vec::new(), &mut out);
    out
}

pub(crate) fn use_tree(
    tokens: &[String],
    i: &mut usize,
    mut path: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    while let Some(tok) = tokens.get(*i) {
        *i += 1;
        match tok.as_str() {
            "{" => {
                while tokens.get(*i).is_some_and(|t| t != "}") {
                    use_tree(tokens, i, path.clone(), out);
                    if tokens.get(*i).is_some_and(|t| t == ",") {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "*" => {
                out.push((path, None));
                return;
            }
            "::" => {}
            word => {
                if word != "self" || path.is_empty() {
                    path.push(word.to_owned());
                }
                if tokens.get(*i).is_some_and(|t| t == "::") {
                    continue;
                }
                let mut alias = path.last().cloned().unwrap_or_default();
                if tokens.get(*i).is_some_and(|t| t == "as") {
                    alias = tokens.get(*i + 1).cloned().unwrap_or_default();
                    *i += 2;
                }
                out.push((path, Some(alias)));
                return;
            }
        }
    }
}
