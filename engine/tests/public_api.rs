//! The engine's public API changes only on purpose.
//!
//! This test lists every public item the crate exposes — items of `pub mod`
//! modules reachable from `lib.rs`, `pub use` re-exports, public methods of
//! inherent impls and public struct fields — by reading the sources, and
//! compares the list with `engine/public-api.txt`. A change to the API makes
//! it fail with the difference; accept a deliberate change with
//! `UPDATE_PUBLIC_API=1 cargo test -p winx-release-engine --test public_api`
//! and commit the new list with the change.
//!
//! The reader is line-based and knows this crate's formatting (rustfmt's):
//! items at the start of a line, one item per line. `pub(crate)` and
//! `pub(super)` items, private modules and `#[cfg(test)]` modules are not
//! part of the API. Items marked `#[doc(hidden)]` are listed with a
//! `(hidden)` tag: they are public for this project's other crates, tests and
//! benches, and are not a supported API.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ITEM_KINDS: &[&str] = &["fn", "struct", "enum", "trait", "const", "static", "type", "unsafe fn", "async fn"];

/// Removes string and char literals and `//` comments so braces inside them
/// do not count.
fn strip(line: &str) -> String {
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

fn name_after(rest: &str) -> String {
    rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The type an `impl` line is for: `impl<T> Foo<T> {` -> `Foo`; trait impls
/// give `None` (their methods are the trait's).
fn impl_type(line: &str) -> Option<String> {
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
    let name = name_after(rest);
    (!name.is_empty()).then_some(name)
}

fn module_file(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return Some((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    nested.exists().then(|| (nested, dir.join(name)))
}

fn scan_module(file: &Path, dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut depth: i64 = 0;
    let mut skip_until: Option<i64> = None;
    let mut cfg_test = false;
    let mut hidden = false;
    let mut owner: Option<(String, i64, bool)> = None; // (type, depth of its body, is a struct body)
    let mut pending_use: Option<String> = None;
    for raw in text.lines() {
        let line = strip(raw);
        let t = line.trim();
        let opens = line.matches('{').count() as i64;
        let closes = line.matches('}').count() as i64;
        if let Some(d) = skip_until {
            depth += opens - closes;
            if depth <= d {
                skip_until = None;
            }
            continue;
        }
        if let Some(u) = pending_use.as_mut() {
            depth += opens - closes;
            u.push(' ');
            u.push_str(t);
            if t.ends_with(';') {
                let u = pending_use.take().unwrap();
                out.insert(format!("{prefix}: {}", u.split_whitespace().collect::<Vec<_>>().join(" ")));
            }
            continue;
        }
        let tag = if hidden { " (hidden)" } else { "" };
        if t.starts_with("#[cfg(test)]") {
            cfg_test = true;
            continue;
        }
        if t.starts_with("#[doc(hidden)]") {
            hidden = true;
            continue;
        }
        if t.starts_with("#[") || t.starts_with("///") || t.starts_with("//!") || t.is_empty() {
            depth += opens - closes;
            continue;
        }
        if cfg_test {
            cfg_test = false;
            if opens > closes {
                skip_until = Some(depth);
                depth += opens - closes;
                hidden = false;
                continue;
            }
        }
        if depth == 0 {
            if let Some(rest) = t.strip_prefix("pub mod ") {
                let name = name_after(rest);
                if rest.trim_end().ends_with(';') {
                    let (f, d) =
                        module_file(dir, &name).unwrap_or_else(|| panic!("module {name} of {}", file.display()));
                    out.insert(format!("{prefix}::{name} mod{tag}"));
                    let sub = format!("{prefix}::{name}");
                    if hidden {
                        let mut inner = BTreeSet::new();
                        scan_module(&f, &d, &sub, &mut inner);
                        out.extend(inner.into_iter().map(|i| {
                            if i.ends_with("(hidden)") {
                                i
                            } else {
                                format!("{i} (hidden)")
                            }
                        }));
                    } else {
                        scan_module(&f, &d, &sub, out);
                    }
                }
            } else if let Some(rest) = t.strip_prefix("pub use ") {
                if t.ends_with(';') {
                    out.insert(format!("{prefix}: pub use {}{tag}", rest.trim_end_matches(';')));
                } else {
                    pending_use = Some(format!("pub use {rest}"));
                }
            } else if let Some(rest) = t.strip_prefix("pub ") {
                for kind in ITEM_KINDS {
                    if let Some(r) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                        out.insert(format!("{prefix}::{} {kind}{tag}", name_after(r)));
                        if *kind == "struct" && opens > closes {
                            owner = Some((name_after(r), depth + 1, true));
                        }
                        break;
                    }
                }
            } else if let Some(ty) = impl_type(t) {
                owner = Some((ty, depth + 1, false));
            }
        } else if let Some((ty, body, is_struct)) = &owner {
            if depth == *body {
                if let Some(rest) = t.strip_prefix("pub ") {
                    if *is_struct {
                        out.insert(format!("{prefix}::{ty}.{} field{tag}", name_after(rest)));
                    } else {
                        for kind in ["fn", "const", "unsafe fn", "async fn"] {
                            if let Some(r) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                                out.insert(format!("{prefix}::{ty}::{} {kind}{tag}", name_after(r)));
                                break;
                            }
                        }
                    }
                }
            }
        }
        hidden = false;
        depth += opens - closes;
        if owner.as_ref().is_some_and(|(_, body, _)| depth < *body) {
            owner = None;
        }
    }
}

/// The public items of the crate whose `lib.rs` is in `src`.
fn public_items(src: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    scan_module(&src.join("lib.rs"), src, "crate", &mut out);
    out
}

#[test]
fn the_public_api_is_the_listed_one() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::env::var_os("PUBLIC_API_SRC").map(PathBuf::from).unwrap_or_else(|| manifest.join("src"));
    let items = public_items(&src);
    let listed_path = manifest.join("public-api.txt");
    let now: String = items.iter().map(|i| format!("{i}\n")).collect();
    if std::env::var_os("PUBLIC_API_COUNT").is_some() {
        let hidden = items.iter().filter(|i| i.ends_with("(hidden)")).count();
        eprintln!("{} public items ({} hidden) in {}", items.len(), hidden, src.display());
        return;
    }
    if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
        std::fs::write(&listed_path, &now).unwrap();
        return;
    }
    let listed = std::fs::read_to_string(&listed_path).unwrap_or_default();
    let listed: BTreeSet<String> = listed.lines().map(str::to_owned).collect();
    let added: Vec<_> = items.difference(&listed).collect();
    let removed: Vec<_> = listed.difference(&items).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the engine's public API changed.\nadded:\n  {}\nremoved:\n  {}\nIf this is deliberate, run \
         UPDATE_PUBLIC_API=1 cargo test -p winx-release-engine --test public_api and commit engine/public-api.txt.",
        added.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
        removed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  "),
    );
}

#[test]
fn the_reader_sees_what_it_must() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(
        src.join("lib.rs"),
        "//! Docs.\npub mod open;\nmod closed;\n#[doc(hidden)]\npub mod inner;\npub use open::{A,\n    B};\n\
         pub fn top() {}\npub(crate) fn not_api() {}\n#[cfg(test)]\nmod tests {\n    pub fn no() {}\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("open.rs"),
        "pub struct A {\n    pub field: u8,\n    private: u8,\n}\npub enum B { X }\nimpl A {\n    pub fn new() -> A { \
         A { field: 0, private: 0 } }\n    fn hidden_fn() {}\n    pub(crate) fn krate() {}\n}\nimpl Default for A {\n    \
         fn default() -> A { A::new() }\n}\nconst S: &str = \"{\";\npub const C: u8 = 1;\n",
    )
    .unwrap();
    std::fs::write(src.join("closed.rs"), "pub fn invisible() {}\n").unwrap();
    std::fs::write(src.join("inner.rs"), "pub fn helper() {}\n").unwrap();
    let items: Vec<String> = public_items(src).into_iter().collect();
    assert_eq!(
        items,
        [
            "crate: pub use open::{A, B};",
            "crate::inner mod (hidden)",
            "crate::inner::helper fn (hidden)",
            "crate::open mod",
            "crate::open::A struct",
            "crate::open::A.field field",
            "crate::open::A::new fn",
            "crate::open::B enum",
            "crate::open::C const",
            "crate::top fn",
        ]
    );
}
