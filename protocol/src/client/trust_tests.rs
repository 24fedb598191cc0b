//! The client sends nothing to an untrusted socket (contract section 1).

use super::fake::*;
use super::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use winx_release_engine::Reason;

fn timeouts() -> Timeouts {
    Timeouts { io: Duration::from_secs(5), release: Duration::from_secs(5), exec_slack: Duration::from_secs(5) }
}

fn answering() -> Arc<Handler> {
    Arc::new(|op: &str, _: &Value| match op {
        "hello" => Some(hello_reply(&["temporary_release"], "i1")),
        _ => Some(json!({"ok": true})),
    })
}

#[test]
fn open_socket_directory_is_refused_before_anything_is_sent() {
    let d = private_tempdir();
    let dir = d.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let g = FakeGuardian::start(dir.join("g.sock"), answering());
    let e = GuardianClient::connect_hello(&g.path, timeouts()).unwrap_err();
    assert!(matches!(e, ClientError::Untrusted(_)), "{e}");
    assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    assert!(e.to_string().contains("mode 0755"), "{e}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(g.ops().is_empty(), "sent {:?}", g.ops());
    // The same directory at 0700 is trusted.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    GuardianClient::connect_hello(&g.path, timeouts()).unwrap();
    assert_eq!(g.ops(), vec!["hello".to_owned()]);
}

#[test]
fn socket_directory_behind_a_link_is_refused() {
    let d = private_tempdir();
    let g = FakeGuardian::start(d.path().join("g.sock"), answering());
    let link = d.path().join("link");
    std::os::unix::fs::symlink(d.path(), &link).unwrap();
    let e = GuardianClient::connect_hello(&link.join("g.sock"), timeouts()).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(g.ops().is_empty());
}

#[test]
fn socket_directory_of_another_owner_is_refused() {
    if !rustix::process::geteuid().is_root() {
        return; // only root can give a directory away
    }
    let d = private_tempdir();
    let dir = d.path().join("theirs");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let g = FakeGuardian::start(dir.join("g.sock"), answering());
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let e = GuardianClient::connect_hello(&g.path, timeouts()).unwrap_err();
    assert!(e.to_string().contains("owned by uid 65534"), "{e}");
    assert!(g.ops().is_empty());
}

/// A listener whose `listen(2)` ran as `nobody` (a thread with its own
/// credentials), bound in a trusted directory: the peer check refuses it
/// and not one byte arrives.
#[test]
fn peer_of_another_uid_receives_nothing() {
    if !rustix::process::geteuid().is_root() {
        return; // only root can take another uid
    }
    let d = private_tempdir();
    let path = d.path().join("g.sock");
    let received = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    {
        let path = path.clone();
        let received = received.clone();
        let accepted = accepted.clone();
        std::thread::spawn(move || {
            use rustix::net::{AddressFamily, SocketType};
            let s = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
            rustix::net::bind(&s, &rustix::net::SocketAddrUnix::new(&path).unwrap()).unwrap();
            // Only this thread becomes nobody; SO_PEERCRED records it at listen.
            rustix::thread::set_thread_res_uid(
                rustix::process::Uid::from_raw(65534),
                rustix::process::Uid::from_raw(65534),
                rustix::process::Uid::from_raw(65534),
            )
            .unwrap();
            rustix::net::listen(&s, 4).unwrap();
            ready_tx.send(()).unwrap();
            let listener = std::os::unix::net::UnixListener::from(s);
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                accepted.fetch_add(1, Ordering::SeqCst);
                let mut buf = Vec::new();
                let _ = conn.set_read_timeout(Some(Duration::from_millis(300)));
                let _ = conn.read_to_end(&mut buf);
                received.fetch_add(buf.len(), Ordering::SeqCst);
                let _ = conn.write_all(&serde_json::to_vec(&hello_reply(&["temporary_release"], "evil")).unwrap());
            }
        });
    }
    ready_rx.recv().unwrap();
    let e = GuardianClient::connect_hello(&path, timeouts()).unwrap_err();
    assert!(matches!(e, ClientError::Untrusted(_)), "{e}");
    assert!(e.to_string().contains("uid 65534"), "{e}");
    assert_eq!(e.reason(), Some(Reason::OwnerUnavailable));
    // Wait for the fake to finish reading the closed connection.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while accepted.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(received.load(Ordering::SeqCst), 0, "bytes reached a guardian of another uid");
}
