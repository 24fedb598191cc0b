//! The wire spelling of requests and replies, and their round trips.

use super::*;
use serde_json::Value;
use winx_release_engine::{Outcome, Reason, ReleaseReport, Status, TargetResult};

fn round_trip(r: Request) {
    let line = serde_json::to_vec(&RequestLine { id: 7, request: r.clone() }).unwrap();
    let back = parse_request(&line).unwrap();
    assert_eq!(back, RequestLine { id: 7, request: r });
}

#[test]
fn every_request_round_trips() {
    round_trip(Request::Hello { protocol: 1, client: "c/1".into() });
    round_trip(Request::SessionOpen {
        workspace: "/w".into(),
        thread_id: "t".into(),
        mode_name: None,
        code_writer_config: None,
    });
    round_trip(Request::SessionOpen {
        workspace: "/w".into(),
        thread_id: "t".into(),
        mode_name: Some("architect".into()),
        code_writer_config: Some(serde_json::json!({"allowed_globs": ["*.py"]})),
    });
    round_trip(Request::Exec {
        workspace: "/w".into(),
        thread_id: "t".into(),
        command: "echo hi".into(),
        wait_for_seconds: Some(1.5),
        is_background: true,
    });
    round_trip(Request::ExecStatus { thread_id: Some("t".into()), command_id: "ab".into(), wait_for_seconds: None });
    round_trip(Request::Release { workspace: "/w".into(), thread_id: "t".into(), targets: vec![], dry_run: false });
    round_trip(Request::Release { workspace: "/w".into(), thread_id: "t".into(), targets: vec![], dry_run: true });
    round_trip(Request::Status { workspace: "/w".into(), thread_id: "t".into() });
    round_trip(Request::Shell {
        workspace: "/w".into(),
        thread_id: "t".into(),
        action: crate::shell::ShellAction::SendText { send_text: "y".into(), submit: true, bg_command_id: None },
        wait_for_seconds: Some(1.0),
    });
    round_trip(Request::GuardianStatus {});
    round_trip(Request::Stop { force: true });
    assert_eq!(Request::OPS.len(), 9);
    // An older frontend's lines still parse: no mode, no dry_run.
    let old = parse_request(br#"{"id":1,"op":"release","workspace":"/w","thread_id":"t","targets":[]}"#).unwrap();
    assert!(matches!(old.request, Request::Release { dry_run: false, .. }));
    let stop = parse_request(br#"{"id":2,"op":"stop"}"#).unwrap();
    assert_eq!(stop.request, Request::Stop { force: false });
}

#[test]
fn the_wire_spelling_is_the_documented_one() {
    let line = br#"{"id":3,"op":"exec","workspace":"/w","thread_id":"t","command":"ls","is_background":false,"future_field":1}"#;
    let r = parse_request(line).unwrap();
    assert_eq!(r.id, 3);
    assert_eq!(r.request.as_str(), "exec");
    let ok = ok_line(
        3,
        &CommandReply {
            command: CommandReport {
                status: CommandStatus::Running,
                command_id: "c".into(),
                exit_code: None,
                output: String::new(),
                output_truncated: false,
            },
            leader_exit_code: None,
            leader_exited: false,
            adopted: false,
        },
    );
    let v: Value = serde_json::from_slice(&ok).unwrap();
    assert_eq!(v["id"], 3);
    assert_eq!(v["ok"], true);
    assert_eq!(v["status"], "running");
    let err: Value = serde_json::from_slice(&error_line(4, ErrorCode::NotFound, "no command c")).unwrap();
    assert_eq!(err, serde_json::json!({"id":4,"ok":false,"error":{"code":"not_found","message":"no command c"}}));
}

#[test]
fn bad_lines_get_one_clear_code() {
    let code = |l: &[u8]| parse_request(l).unwrap_err();
    assert_eq!(code(b"not json").code, ErrorCode::InvalidInput);
    assert_eq!(code(b"[1]").code, ErrorCode::InvalidInput);
    assert_eq!(code(br#"{"op":"hello"}"#).code, ErrorCode::InvalidInput);
    let e = code(br#"{"id":9,"op":"reboot"}"#);
    assert_eq!((e.id, e.code), (9, ErrorCode::UnknownOp));
    let e = code(br#"{"id":5,"op":"exec","workspace":"/w"}"#);
    assert_eq!((e.id, e.code), (5, ErrorCode::InvalidInput));
}

#[test]
fn replies_round_trip_through_the_envelope() {
    let report = ReleaseReport {
        status: Status::Completed,
        error_code: None,
        detail: None,
        touched: true,
        bytes_reclaimed: 4096,
        files: vec![TargetResult {
            file_path: "/w/.winx/tmp/session-0/h".into(),
            outcome: Outcome::Released,
            reason: None,
            bytes_reclaimed: 4096,
            quarantine_path: None,
        }],
    };
    let line = ok_line(2, &ReleaseReply { report: report.clone() });
    let env: ReplyLine = serde_json::from_slice(&line).unwrap();
    assert!(env.ok && env.error.is_none() && env.id == 2);
    let back: ReleaseReply = serde_json::from_value(Value::Object(env.body)).unwrap();
    assert_eq!(back.report, report);
    let unknown: ErrorBody = serde_json::from_str(r#"{"code":"brand_new","message":"m"}"#).unwrap();
    assert_eq!(unknown.code, ErrorCode::Other("brand_new".into()));
    let reason: ErrorBody = serde_json::from_str(r#"{"code":"path_not_exact"}"#).unwrap();
    assert_eq!(reason.code, ErrorCode::Reason(Reason::PathNotExact));
    assert_eq!(serde_json::to_value(&reason.code).unwrap(), "path_not_exact");
}
