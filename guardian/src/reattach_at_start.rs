//! The shells an earlier guardian left, taken over at this one's start
//! (`shell/reattach.rs`), with a background shell's command back at its
//! prompt kicking retention, as for a shell this guardian started.

use std::sync::Arc;

use crate::sessions::Guardian;

/// Takes over, at the guardian's start, the shells an earlier one left
/// (a background shell's command back at its prompt kicks retention, as
/// for a shell this guardian started).
pub(crate) fn reattach_at_start(g: &Arc<Guardian>) -> usize {
    let weak = Arc::downgrade(g);
    g.shells.reattach(&g.runtime, || {
        let weak = weak.clone();
        Box::new(move || {
            if let Some(g) = weak.upgrade() {
                g.retention.kick(None);
            }
        })
    })
}
