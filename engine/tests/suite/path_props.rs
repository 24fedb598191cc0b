//! Property tests of the exact-path rules and request validation.

use std::path::{Component, Path};

use proptest::prelude::*;
use winx_release_engine::layout::{session_name, Layout};
use winx_release_engine::preflight::place_all;
use winx_release_engine::preflight::{check_exact, place_helper};
use winx_release_engine::{Reason, Refusal};

const WS: &str = "/work/ws";
const THREAD: &str = "thread-1";

fn layout() -> Layout {
    Layout::new(WS, "/data").unwrap()
}

/// Path-like strings built from components that matter to the rules.
fn path_like() -> impl Strategy<Value = String> {
    let comp = prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("work".to_owned()),
        Just("ws".to_owned()),
        Just(".winx".to_owned()),
        Just("tmp".to_owned()),
        Just(session_name(THREAD)),
        Just(session_name("other")),
        Just("session-zz".to_owned()),
        Just(".winx-release-0011".to_owned()),
        Just("h.py".to_owned()),
        Just("a*b".to_owned()),
        Just("q?".to_owned()),
        Just("[x]".to_owned()),
        Just("nul\0".to_owned()),
        "[a-z.]{1,4}",
        "\\PC{1,3}",
    ];
    let prefix = prop_oneof![
        Just(String::new()),
        Just(WS.to_owned()),
        Just(format!("{WS}/.winx/tmp/{}", session_name(THREAD))),
        Just(format!("{WS}/.winx/tmp/{}", session_name(THREAD))),
        Just(format!("{WS}/.winx/tmp/{}", session_name("other"))),
    ];
    (prefix, any::<bool>(), prop::collection::vec(comp, 0..6), any::<bool>()).prop_map(
        |(prefix, abs, comps, trailing)| {
            let mut s = if prefix.is_empty() && !abs { String::new() } else { format!("{prefix}/") };
            s.push_str(&comps.join("/"));
            if trailing {
                s.push('/');
            }
            s
        },
    )
}

/// The lexically normalised form of a path, as a kernel walk would see it
/// (without links).
fn normalise(s: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in Path::new(s).components() {
        match c {
            Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    format!("/{}", parts.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    /// No accepted path escapes this thread's session directory.
    #[test]
    fn accepted_helpers_stay_in_the_session(s in path_like()) {
        let layout = layout();
        if let Ok(h) = place_helper(&layout, THREAD, &s) {
            let session = layout.session_dir(THREAD);
            let prefix = format!("{}/", session.to_str().unwrap());
            prop_assert!(s.starts_with(&prefix));
            prop_assert!(!h.rel.is_empty());
            for c in &h.rel {
                let c = c.to_str().expect("a UTF-8 request gives UTF-8 components");
                prop_assert!(!c.is_empty() && c != "." && c != ".." && !c.contains('/'));
                prop_assert!(!c.starts_with(".winx-release-"));
            }
            prop_assert_eq!(normalise(&s), s.clone());
            prop_assert!(normalise(&s).starts_with(&prefix));
        }
    }

    /// Accepted strings are already normal: normalisation never makes two
    /// distinct accepted strings equal.
    #[test]
    fn normalisation_never_merges_accepted_strings(a in path_like(), b in path_like()) {
        if check_exact(&a).is_ok() && check_exact(&b).is_ok() && a != b {
            prop_assert_ne!(normalise(&a), normalise(&b));
        }
    }

    /// Exactness refuses every string that needs normalising.
    #[test]
    fn strings_needing_normalisation_are_refused(s in path_like()) {
        if s.starts_with('/') && !s.contains('\0') && normalise(&s) != s {
            prop_assert!(check_exact(&s).is_err());
        }
    }

    /// Validation is total: any list of strings gets a verdict, never a panic,
    /// and a refusal names a reason for a listed target.
    #[test]
    fn validation_is_total(paths in prop::collection::vec(path_like(), 0..12)) {
        match place_all(&layout(), THREAD, &paths) {
            Ok(h) => prop_assert_eq!(h.len(), paths.len()),
            Err(Refusal { reason: r, own, .. }) => {
                prop_assert_eq!(own.len(), paths.len());
                if r != Reason::FileCount {
                    prop_assert!(own.contains(&Some(r)));
                }
            }
        }
    }
}

#[test]
fn ten_thousand_entries_are_refused_quickly() {
    let layout = layout();
    let session = layout.session_dir(THREAD);
    let paths: Vec<String> = (0..10_000).map(|i| format!("{}/h{i}.py", session.display())).collect();
    let t = std::time::Instant::now();
    let r = place_all(&layout, THREAD, &paths);
    assert!(matches!(r, Err(Refusal { reason: Reason::FileCount, .. })));
    assert!(t.elapsed().as_millis() < 200);
}

#[test]
fn over_long_and_non_utf8_like_names_are_refused() {
    let session = layout().session_dir(THREAD);
    let long_name = format!("{}/{}", session.display(), "a".repeat(256));
    assert_eq!(check_exact(&long_name), Err(Reason::PathNotExact));
    let long_path = format!("{}/{}", session.display(), "abc/".repeat(1100) + "x");
    assert_eq!(check_exact(&long_path), Err(Reason::PathNotExact));
    // U+FFFD stands where a non-UTF-8 byte was replaced; it is a plain
    // character and stays exact, but never equals a different byte name.
    let replaced = format!("{}/\u{FFFD}.py", session.display());
    assert!(place_helper(&layout(), THREAD, &replaced).is_ok());
}

#[test]
fn the_strategy_reaches_accepted_helpers() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = path_like();
    let accepted = (0..4000)
        .filter(|_| place_helper(&layout(), THREAD, strat.new_tree(&mut runner).unwrap().current()).is_ok())
        .count();
    assert!(accepted > 60, "only {accepted} accepted helpers: the properties would be vacuous");
}
