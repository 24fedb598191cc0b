//! Fuzzes the guardian protocol's request parser: any bytes give a parsed
//! request or one error code (`invalid_input`, `unknown_op`), never a panic;
//! a parsed request serialises back to a line that parses to the same
//! request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use winx_release_protocol::messages::{parse_request, ErrorCode};

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Ok(line) => {
            let again = serde_json::to_vec(&line).expect("a parsed request serialises");
            let back = parse_request(&again).expect("a serialised request parses");
            assert_eq!(back.id, line.id);
            assert_eq!(back.request.as_str(), line.request.as_str());
        }
        Err(e) => assert!(matches!(e.code, ErrorCode::InvalidInput | ErrorCode::UnknownOp)),
    }
});
