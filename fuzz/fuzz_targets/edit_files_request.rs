//! Fuzzes the `EditFiles` wire parser and the path validator: any bytes must
//! give a verdict (a parsed request or a reason code), never a panic, and an
//! accepted release path never leaves the session directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use winx_release_engine::layout::Layout;
use winx_release_engine::preflight::place_all;
use winx_release_mcp_tools::wire::{parse_edit_files, EditRequest};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    if let Ok(EditRequest::Release(r)) = parse_edit_files(&value) {
        let layout = Layout::new("/fuzz/ws", "/fuzz/data").unwrap();
        let paths = r.paths();
        if let Ok(helpers) = place_all(&layout, "fuzz-thread", &paths) {
            let session = layout.session_dir("fuzz-thread");
            for h in helpers {
                assert!(h.path.to_str().unwrap().starts_with(&format!("{}/", session.display())));
                assert!(h.rel.iter().all(|c| !c.is_empty() && c != "." && c != ".."));
            }
        }
    }
});
