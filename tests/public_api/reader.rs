//! The reader of `public_api`: a crate's public items from its sources,
//! line by line (the rules are in `main.rs`'s docs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::lex::{
    impl_type, module_file, name_after, strip, use_leaves, visibility, Vis, ITEM_KINDS, MEMBER_KINDS, OFF_LINUX,
};

/// One name a `use` brings in: `a::b::{c as d}` -> path `[a, b, c]`, alias
/// `d`; a glob `a::*` has the path `[a]` and no alias.
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    alias: Option<String>,
    vis: Vis,
    hidden: bool,
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
pub(crate) fn public_items(src: &Path) -> BTreeSet<String> {
    let krate = Crate::read(src);
    let mut lister =
        Lister { reachable: krate.reachable(), members: krate.members(), krate: &krate, out: BTreeSet::new() };
    lister.module(0, "crate", false);
    lister.out
}
