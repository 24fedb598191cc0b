//! Each library crate's public API changes only on purpose.
//!
//! This test lists, for every library crate of the workspace (`CRATES`),
//! every public item the crate exposes — items of `pub mod`
//! modules reachable from `lib.rs`, `pub use` re-exports, public methods of
//! inherent impls and public struct fields — by reading the sources, and
//! compares the list with the crate's `public-api.txt` (`engine/public-api.txt`,
//! …). A change to an API makes it fail with the difference; accept a
//! deliberate change with `UPDATE_PUBLIC_API=1 cargo test --test public_api`
//! and commit the new lists with the change. `PUBLIC_API_COUNT=1` prints the
//! counts instead (a supported function is an ` fn` line without `(hidden)`).
//!
//! The reader is line-based and knows this crate's formatting (rustfmt's):
//! items at the start of a line, one item per line. It reads every module
//! file, private ones too, so that it can follow a `pub use` to the item it
//! names: an item re-exported from a private module (`pub use
//! runtime::Runtime` in `executions`) is listed under the path an embedder
//! writes (`crate::executions::Runtime`), with its public methods and fields,
//! like an item of a public module; an item re-exported from a public module
//! is listed once, under its own path. Methods are listed with their type
//! wherever the `impl` block is (another file, a private module). `pub(crate)`
//! and `pub(super)` items, private modules and `#[cfg(test)]` items are not
//! part of the API, nor the code of other platforms than Linux (items
//! behind `#[cfg(not(all(target_os = "linux", not(winx_foreign))))]`, the
//! same API answering `unsupported_platform`). Items marked `#[doc(hidden)]` (or inside a hidden module,
//! or re-exported by a hidden `pub use`) are listed with a `(hidden)` tag:
//! they are public for this project's other crates, tests and benches, and
//! are not a supported API.

use std::collections::BTreeSet;
use std::path::Path;

mod lex;
mod reader;

use reader::public_items;

/// Every library crate of the workspace, bottom up: each keeps its list in
/// `<dir>/public-api.txt`.
const CRATES: &[&str] =
    &["kernel", "runtime", "engine", "protocol", "guardian", "host", "mcp-tools", "stress", "tools"];

#[test]
fn the_public_api_is_the_listed_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut changed = Vec::new();
    for dir in CRATES {
        let manifest = root.join(dir);
        let src = manifest.join("src");
        let items = public_items(&src);
        let listed_path = manifest.join("public-api.txt");
        let now: String = items.iter().map(|i| format!("{i}\n")).collect();
        if std::env::var_os("PUBLIC_API_COUNT").is_some() {
            let hidden = items.iter().filter(|i| i.ends_with("(hidden)")).count();
            let fns: Vec<_> = items.iter().filter(|i| i.contains(" fn")).collect();
            let supported = fns.iter().filter(|i| !i.ends_with("(hidden)")).count();
            eprintln!(
                "{} public items ({} hidden) in {}; {} functions, {} supported",
                items.len(),
                hidden,
                src.display(),
                fns.len(),
                supported
            );
            continue;
        }
        if std::env::var_os("UPDATE_PUBLIC_API").is_some() {
            std::fs::write(&listed_path, &now).unwrap();
            continue;
        }
        let listed = std::fs::read_to_string(&listed_path).unwrap_or_default();
        let listed: BTreeSet<String> = listed.lines().map(str::to_owned).collect();
        let added: Vec<_> = items.difference(&listed).map(|i| format!("  {i}")).collect();
        let removed: Vec<_> = listed.difference(&items).map(|i| format!("  {i}")).collect();
        if !added.is_empty() || !removed.is_empty() {
            changed.push(format!("{dir}:\nadded:\n{}\nremoved:\n{}", added.join("\n"), removed.join("\n")));
        }
    }
    assert!(
        changed.is_empty(),
        "a crate's public API changed.\n{}\nIf this is deliberate, run UPDATE_PUBLIC_API=1 cargo test --test \
         public_api and commit the crates' public-api.txt.",
        changed.join("\n")
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

#[test]
fn the_reader_follows_re_exports_into_private_modules() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod open;\nmod runtime;\nmod rules;\nmod globbed;\n#[doc(hidden)]\npub use rules::helper;\n\
         pub use runtime::Runtime;\npub use open::Listed;\npub use globbed::*;\n",
    );
    // `Runtime` is defined in a private module; its methods are in a file
    // below it, behind a private `use`.
    write(
        "runtime.rs",
        "mod extra;\n/// A type.\npub struct Runtime {\n    pub shown: u8,\n    hidden_field: u8,\n    #[cfg(test)]\n    pub test_only: u8,\n}\n\
         impl Runtime {\n    pub const fn start() -> Runtime { todo!() }\n    pub(crate) fn inside(&self) {}\n}\n",
    );
    write(
        "runtime/extra.rs",
        "use super::Runtime;\nstruct Local;\nimpl Local {\n    pub fn local(&self) {}\n}\nimpl Runtime {\n    \
         pub fn liveness(\n        &self,\n    ) -> u8 {\n        0\n    }\n    #[doc(hidden)]\n    pub fn \
         internal(&self) {}\n}\n",
    );
    // A chain: `open` re-exports from a private module, which re-exports
    // from the crate root's private module.
    write("open.rs", "mod inner;\npub use inner::{check, Listed as Renamed};\npub struct Listed;\n");
    write("open/inner.rs", "pub use crate::rules::check;\npub use super::Listed;\n");
    write("rules.rs", "pub fn check() {}\npub fn helper() {}\n#[cfg(test)]\npub fn test_only() {}\n");
    write("globbed.rs", "pub fn globbed() {}\npub(crate) fn not_api() {}\n");
    let items: Vec<String> = public_items(src).into_iter().collect();
    assert_eq!(
        items,
        [
            "crate: pub use globbed::*",
            "crate: pub use open::Listed",
            "crate: pub use rules::helper (hidden)",
            "crate: pub use runtime::Runtime",
            "crate::Runtime struct",
            "crate::Runtime.shown field",
            "crate::Runtime::internal fn (hidden)",
            "crate::Runtime::liveness fn",
            "crate::Runtime::start fn",
            "crate::globbed fn",
            "crate::helper fn (hidden)",
            "crate::open mod",
            "crate::open: pub use inner::{check, Listed as Renamed}",
            "crate::open::Listed struct",
            // An alias through a private module is a path of its own.
            "crate::open::Renamed struct",
            "crate::open::check fn",
        ]
    );
}
