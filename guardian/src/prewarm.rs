//! Reads a workspace's backing roots into the directory cache once, off the
//! request path, when its first session registers.
//!
//! Without it the first release after a guardian start pays the cold fill
//! of every backing directory (about a sixth of a `find` of the roots at
//! 48,000 entries); with it that cost lands while the agent is still
//! reading its helpers, and a release scans only what changed since. A
//! release never trusts the fill for exactness: it uses only walks that
//! started after its targets were checked, and one that comes during the
//! fill waits for it and then reads the directories whose change time
//! moved (`winx_release_engine::release::prewarm_backing_roots`).

use std::sync::Arc;

use winx_release_engine::layout::Layout;
use winx_release_engine::release::prewarm_backing_roots;
use winx_release_engine::scan::ScanLimits;

use crate::sessions::Guardian;
use crate::sync::lock;

/// Starts the fill of `layout`'s backing roots on a thread of its own,
/// unless this workspace's were started already.
pub fn once(g: &Arc<Guardian>, layout: &Layout) {
    let key = layout.workspace().to_path_buf();
    if !lock(&g.prewarmed).insert(key.clone()) {
        return;
    }
    let (g2, layout) = (Arc::clone(g), layout.clone());
    let spawned = std::thread::Builder::new().name("winx-prewarm".into()).spawn(move || {
        let t = std::time::Instant::now();
        let entries = prewarm_backing_roots(&layout, &g2.scanner, ScanLimits::default());
        tracing::debug!(workspace = %layout.workspace().display(), entries, us = t.elapsed().as_micros(), "prewarm");
    });
    if let Err(e) = spawned {
        // No thread: the first release fills the cache itself, as before.
        tracing::warn!("prewarm thread: {e}");
        lock(&g.prewarmed).remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A workspace's first registration reads its backing roots into the
    /// cache without any release, once; a scan after it reads only the
    /// directory that changed.
    #[test]
    fn the_first_session_of_a_workspace_fills_the_cache_once() {
        let (data, g) = crate::sessions::tests::guardian();
        let g = Arc::new(g);
        let ws = tempfile::tempdir().unwrap();
        let scratch = ws.path().join(".winx/scratch");
        for d in 0..40 {
            std::fs::create_dir_all(scratch.join(format!("d{d}"))).unwrap();
            std::fs::write(scratch.join(format!("d{d}/f")), b"x").unwrap();
        }
        let layout = Layout::new(ws.path(), data.path()).unwrap();
        assert_eq!(g.scanner.cache().stats().reads, 0);
        once(&g, &layout);
        once(&g, &layout);
        let deadline = Instant::now() + Duration::from_secs(20);
        while g.scanner.stats().flights == 0 || g.scanner.cache().stats().reads < 41 {
            assert!(Instant::now() < deadline, "no fill: {:?}", g.scanner.cache().stats());
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.scanner.stats().flights, 1, "a second registration filled again");
        // The racy rule: a directory changed within the clock's grain of
        // its read is read again, so let the records settle.
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(scratch.join("d7/g"), b"y").unwrap();
        let before = g.scanner.cache().stats().reads;
        assert!(prewarm_backing_roots(&layout, &g.scanner, ScanLimits::default()) >= 81);
        let read = g.scanner.cache().stats().reads - before;
        assert!(read <= 3, "a warm scan read {read} directories");
    }
}
