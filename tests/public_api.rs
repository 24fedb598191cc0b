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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ITEM_KINDS: &[&str] = &["fn", "struct", "enum", "trait", "const", "static", "type", "unsafe fn", "async fn"];
/// The `cfg` of every platform but Linux (and Linux with `--cfg winx_foreign`).
const OFF_LINUX: &str = "#[cfg(not(all(target_os = \"linux\", not(winx_foreign))))]";
const MEMBER_KINDS: &[&str] = &["fn", "const", "unsafe fn", "async fn"];

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

/// The visibility an item line starts with, and the rest of the line.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Vis {
    /// `pub`: visible wherever its module is.
    Public,
    /// `pub(crate)`, `pub(super)`, `pub(in …)` or nothing.
    Private,
}

fn visibility(t: &str) -> (Vis, &str) {
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
fn impl_type(line: &str) -> Option<Vec<String>> {
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

fn module_file(dir: &Path, name: &str) -> Option<(PathBuf, PathBuf)> {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return Some((flat, dir.join(name)));
    }
    let nested = dir.join(name).join("mod.rs");
    nested.exists().then(|| (nested, dir.join(name)))
}

/// One name a `use` brings in: `a::b::{c as d}` -> path `[a, b, c]`, alias
/// `d`; a glob `a::*` has the path `[a]` and no alias.
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    alias: Option<String>,
    vis: Vis,
    hidden: bool,
}

/// Splits a use tree (`a::{b, c::d as e, f::*}`) into its leaves.
fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
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

fn use_tree(tokens: &[String], i: &mut usize, mut path: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
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

/// A public method or associated const of a type: (name, kind, hidden).
type Member = (String, &'static str, bool);

/// An item a module defines.
#[derive(Debug)]
struct Item {
    kind: &'static str,
    vis: Vis,
    hidden: bool,
    /// Public fields of a struct: (name, hidden).
    fields: BTreeSet<(String, bool)>,
}

#[derive(Debug)]
struct Child {
    id: usize,
    vis: Vis,
    hidden: bool,
}

/// What one module file says about itself.
#[derive(Debug, Default)]
struct Module {
    parent: Option<usize>,
    children: BTreeMap<String, Child>,
    items: BTreeMap<String, Item>,
    uses: Vec<UseLeaf>,
    /// The `pub use` lines as written (normalized), with their hidden tag.
    use_lines: Vec<(String, bool)>,
    /// Inherent impls: the type as written, and its public members
    /// (name, kind, hidden).
    impls: Vec<(Vec<String>, Vec<Member>)>,
}

/// Every module of the crate, public or not; the root is 0.
struct Crate {
    modules: Vec<Module>,
}

#[derive(Clone, Debug, PartialEq)]
enum Target {
    Module(usize),
    Item(usize, String),
    /// Another crate (`std`, `rustix`).
    Extern,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut krate = Crate { modules: Vec::new() };
        krate.parse(&src.join("lib.rs"), src, None);
        krate
    }

    fn parse(&mut self, file: &Path, dir: &Path, parent: Option<usize>) -> usize {
        let id = self.modules.len();
        self.modules.push(Module { parent, ..Module::default() });
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut depth: i64 = 0;
        let mut skip_until: Option<i64> = None;
        let mut skip_item = false;
        let mut cfg_test = false;
        let mut hidden = false;
        let mut owner: Option<(i64, Option<String>, usize)> = None; // (depth of its body, struct name, impl index)
        let mut pending_use: Option<(String, Vis, bool)> = None;
        // Inside a top-level `macro_rules!` of one arm (`(…) => { items }`):
        // the items its arm defines are read as the module's own (the
        // engine's code registry defines its enums so), two levels down.
        let mut in_macro = false;
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
            if skip_item {
                // The rest of a `#[cfg(test)]` item that spans lines.
                if opens > closes {
                    skip_until = Some(depth);
                    depth += opens - closes;
                }
                skip_item = !(t.ends_with(';') || t.ends_with('}') || opens > closes);
                continue;
            }
            if let Some((u, vis, h)) = pending_use.as_mut() {
                depth += opens - closes;
                u.push(' ');
                u.push_str(t);
                if t.ends_with(';') {
                    let (vis, h) = (*vis, *h);
                    let u = pending_use.take().unwrap().0;
                    self.add_use(id, &u, false, vis, h);
                }
                continue;
            }
            // The list is Linux's API: the code of every other platform
            // (the runtime's `foreign`, the engine's off-Linux stubs) has
            // the same items, and is skipped like a test's.
            if t.starts_with("#[cfg(test)]") || raw.trim().starts_with(OFF_LINUX) {
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
                hidden = false;
                if opens > closes {
                    skip_until = Some(depth);
                    depth += opens - closes;
                } else {
                    // A field or a struct literal's field (`name: T,`) ends
                    // at its comma.
                    skip_item = !(t.ends_with(';') || t.ends_with('}') || t.ends_with(','));
                }
                continue;
            }
            // The depth the items of this module are read at.
            let level = if in_macro { depth - 2 } else { depth };
            if depth == 0 && t.starts_with("macro_rules!") {
                in_macro = opens > closes;
                depth += opens - closes;
                continue;
            }
            if level == 0 {
                let (vis, rest) = visibility(t);
                if let Some(rest) = rest.strip_prefix("mod ") {
                    let name = name_after(rest);
                    if rest.trim_end().ends_with(';') {
                        let (f, d) =
                            module_file(dir, &name).unwrap_or_else(|| panic!("module {name} of {}", file.display()));
                        let child = self.parse(&f, &d, Some(id));
                        self.modules[id].children.insert(name, Child { id: child, vis, hidden });
                    } else {
                        assert!(vis == Vis::Private, "{}: inline public module {name}: not read", file.display());
                        skip_until = Some(depth);
                    }
                } else if let Some(tree) = rest.strip_prefix("use ") {
                    if t.ends_with(';') {
                        self.add_use(id, &format!("use {tree}"), true, vis, hidden);
                    } else {
                        pending_use = Some((format!("use {tree}"), vis, hidden));
                    }
                } else if let Some(ty) = impl_type(t) {
                    self.modules[id].impls.push((ty, Vec::new()));
                    owner = Some((level + 1, None, self.modules[id].impls.len() - 1));
                } else {
                    for kind in ITEM_KINDS {
                        if let Some(r) = rest.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
                            let name = name_after(r);
                            let item = self.modules[id].items.entry(name.clone()).or_insert(Item {
                                kind,
                                vis,
                                hidden,
                                fields: BTreeSet::new(),
                            });
                            item.hidden &= hidden;
                            if *kind == "struct" && opens > closes {
                                owner = Some((level + 1, Some(name), 0));
                            }
                            break;
                        }
                    }
                }
            } else if let Some((body, ty, index)) = &owner {
                if level == *body {
                    if let (Vis::Public, rest) = visibility(t) {
                        let m = &mut self.modules[id];
                        match ty {
                            Some(ty) => {
                                m.items.get_mut(ty).unwrap().fields.insert((name_after(rest), hidden));
                            }
                            None => {
                                if let Some(kind) = MEMBER_KINDS
                                    .iter()
                                    .find(|k| rest.strip_prefix(**k).is_some_and(|r| r.starts_with(' ')))
                                {
                                    let name = name_after(&rest[kind.len() + 1..]);
                                    m.impls[*index].1.push((name, kind, hidden));
                                }
                            }
                        }
                    }
                }
            }
            hidden = false;
            depth += opens - closes;
            in_macro &= depth > 0;
            let level = if in_macro { depth - 2 } else { depth };
            if owner.as_ref().is_some_and(|(body, _, _)| level < *body) {
                owner = None;
            }
        }
        id
    }

    fn add_use(&mut self, id: usize, text: &str, one_line: bool, vis: Vis, hidden: bool) {
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let tree = text.trim_start_matches("use ").trim_end_matches(';');
        for (path, alias) in use_leaves(tree) {
            self.modules[id].uses.push(UseLeaf { path, alias, vis, hidden });
        }
        if vis == Vis::Public {
            // (A `pub use` that spans lines keeps its `;` in the list, as it always has.)
            let line = if one_line { text.trim_end_matches(';') } else { &text };
            self.modules[id].use_lines.push((format!("pub {line}"), hidden));
        }
    }

    /// What `path`, written in module `from`, names.
    fn resolve(&self, from: usize, path: &[String], budget: usize) -> Option<Target> {
        assert!(budget > 0, "a `use` cycle at {path:?}");
        let mut cur = from;
        for (i, seg) in path.iter().enumerate() {
            let last = i + 1 == path.len();
            let found = match seg.as_str() {
                "crate" if i == 0 => Target::Module(0),
                "self" if i == 0 => Target::Module(cur),
                "super" => Target::Module(self.modules[cur].parent?),
                _ => match self.lookup(cur, seg, last, budget) {
                    Some(t) => t,
                    None if i == 0 => return Some(Target::Extern),
                    None => return None,
                },
            };
            match found {
                Target::Module(m) => cur = m,
                other if last => return Some(other),
                Target::Extern => return Some(Target::Extern),
                Target::Item(..) => return None,
            }
        }
        Some(Target::Module(cur))
    }

    /// What `name` is in module `m`: a child module, an item, or what a
    /// `use` of any visibility brings in (explicit names before globs).
    fn lookup(&self, m: usize, name: &str, last: bool, budget: usize) -> Option<Target> {
        let module = &self.modules[m];
        if last && module.items.contains_key(name) {
            return Some(Target::Item(m, name.to_owned()));
        }
        if let Some(child) = module.children.get(name) {
            return Some(Target::Module(child.id));
        }
        if let Some(u) = module.uses.iter().find(|u| u.alias.as_deref() == Some(name)) {
            return self.resolve(m, &u.path, budget - 1);
        }
        module.uses.iter().filter(|u| u.alias.is_none()).find_map(|u| match self.resolve(m, &u.path, budget - 1)? {
            Target::Module(g) => self.lookup(g, name, last, budget - 1),
            _ => None,
        })
    }

    /// Whether `name` is public in module `m` (defined, re-exported or a
    /// child module there).
    fn names_publicly(&self, m: usize, name: &str) -> bool {
        let module = &self.modules[m];
        module.items.get(name).is_some_and(|i| i.vis == Vis::Public)
            || module.children.get(name).is_some_and(|c| c.vis == Vis::Public) || module.uses.iter().any(|u| {
            u.vis == Vis::Public
                && match &u.alias {
                    Some(a) => a == name,
                    None => {
                        matches!(self.resolve(m, &u.path, 16), Some(Target::Module(g)) if self.names_publicly(g, name))
                    }
                }
        })
    }

    /// The modules an embedder can name: the root, and the public children
    /// of those.
    fn reachable(&self) -> BTreeSet<usize> {
        let mut out = BTreeSet::from([0]);
        let mut todo = vec![0];
        while let Some(m) = todo.pop() {
            for child in self.modules[m].children.values().filter(|c| c.vis == Vis::Public) {
                if out.insert(child.id) {
                    todo.push(child.id);
                }
            }
        }
        out
    }

    /// The public members of every type, keyed by where the type is
    /// defined; an `impl` block can be in any module.
    fn members(&self) -> BTreeMap<(usize, String), Vec<Member>> {
        let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for (m, module) in self.modules.iter().enumerate() {
            for (ty, members) in &module.impls {
                match self.resolve(m, ty, 16) {
                    Some(Target::Item(d, name)) => out.entry((d, name)).or_default().extend(members.iter().cloned()),
                    other => panic!("impl {} in module #{m}: its type is {other:?}", ty.join("::")),
                }
            }
        }
        out
    }
}

/// Lists the public API of the crate whose `lib.rs` is in `src`.
struct Lister<'a> {
    krate: &'a Crate,
    reachable: BTreeSet<usize>,
    members: BTreeMap<(usize, String), Vec<Member>>,
    out: BTreeSet<String>,
}

fn tag(hidden: bool) -> &'static str {
    if hidden {
        " (hidden)"
    } else {
        ""
    }
}

impl Lister<'_> {
    fn module(&mut self, m: usize, prefix: &str, hidden: bool) {
        let module = &self.krate.modules[m];
        for (name, child) in module.children.iter().filter(|(_, c)| c.vis == Vis::Public) {
            let h = hidden || child.hidden;
            self.out.insert(format!("{prefix}::{name} mod{}", tag(h)));
            self.module(child.id, &format!("{prefix}::{name}"), h);
        }
        for (name, item) in module.items.iter().filter(|(_, i)| i.vis == Vis::Public) {
            self.item(m, name, &format!("{prefix}::{name}"), hidden || item.hidden);
        }
        for (line, h) in &module.use_lines {
            self.out.insert(format!("{prefix}: {line}{}", tag(hidden || *h)));
        }
        for u in module.uses.iter().filter(|u| u.vis == Vis::Public) {
            let names: Vec<String> = match &u.alias {
                Some(alias) => vec![alias.clone()],
                None => match self.krate.resolve(m, &u.path, 16) {
                    Some(Target::Module(g)) => self.public_names(g),
                    other => panic!("pub use {}::* in module #{m}: {other:?}", u.path.join("::")),
                },
            };
            for name in names {
                let mut path = u.path.clone();
                if u.alias.is_some() {
                    path.pop();
                }
                let from = match self.krate.resolve(m, &path, 16) {
                    Some(Target::Module(from)) => from,
                    // Another crate's item, supported there: listed where it is re-exported.
                    Some(Target::Extern) => {
                        let h = hidden || u.hidden;
                        self.out.insert(format!("{prefix}::{name} re-export of {}{}", u.path.join("::"), tag(h)));
                        continue;
                    }
                    _ => panic!("pub use {} in module #{m}: not a module path", path.join("::")),
                };
                let original = u.path.last().filter(|_| u.alias.is_some()).cloned().unwrap_or(name.clone());
                if self.reachable.contains(&from) && self.krate.names_publicly(from, &original) {
                    continue; // listed under its own public path
                }
                let at = format!("{prefix}::{name}");
                let h = hidden || u.hidden;
                match self.krate.lookup(from, &original, true, 16) {
                    Some(Target::Item(d, n)) => {
                        let h = h || self.krate.modules[d].items[&n].hidden;
                        self.item(d, &n, &at, h);
                    }
                    Some(Target::Module(g)) => {
                        self.out.insert(format!("{at} mod{}", tag(h)));
                        self.module(g, &at, h);
                    }
                    other => panic!("pub use {} in module #{m}: {other:?}", u.path.join("::")),
                }
            }
        }
    }

    fn public_names(&self, m: usize) -> Vec<String> {
        let module = &self.krate.modules[m];
        let mut names: BTreeSet<String> = module.items.keys().chain(module.children.keys()).cloned().collect();
        names.extend(module.uses.iter().filter_map(|u| u.alias.clone()));
        names.into_iter().filter(|n| self.krate.names_publicly(m, n)).collect()
    }

    fn item(&mut self, m: usize, name: &str, at: &str, hidden: bool) {
        let item = &self.krate.modules[m].items[name];
        self.out.insert(format!("{at} {}{}", item.kind, tag(hidden)));
        for (field, h) in &item.fields {
            self.out.insert(format!("{at}.{field} field{}", tag(hidden || *h)));
        }
        for (member, kind, h) in self.members.get(&(m, name.to_owned())).into_iter().flatten() {
            self.out.insert(format!("{at}::{member} {kind}{}", tag(hidden || *h)));
        }
    }
}

/// The public items of the crate whose `lib.rs` is in `src`.
fn public_items(src: &Path) -> BTreeSet<String> {
    let krate = Crate::read(src);
    let mut lister =
        Lister { reachable: krate.reachable(), members: krate.members(), krate: &krate, out: BTreeSet::new() };
    lister.module(0, "crate", false);
    lister.out
}

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
