//! Fuzzes the release journal's parser (what recovery reads after a crash):
//! any bytes give `Valid`, `Torn`, `Idle` or `Corrupt`, never a panic; a valid
//! journal written back (intent line, then its marks) parses to the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use winx_release_engine::journal::{parse_journal, JournalMark, ReadJournal};

fuzz_target!(|data: &[u8]| {
    if let ReadJournal::Valid { intent, verified } = parse_journal(data) {
        let mut again = serde_json::to_vec(&intent).expect("an intent serialises");
        again.push(b'\n');
        for &index in &verified {
            again.extend(serde_json::to_vec(&JournalMark::Verified { index }).expect("a mark serialises"));
            again.push(b'\n');
        }
        match parse_journal(&again) {
            ReadJournal::Valid { intent: i2, verified: v2 } => {
                assert_eq!(i2, intent);
                assert_eq!(v2, verified);
            }
            other => panic!("a written-back journal does not parse: {other:?}"),
        }
    }
});
