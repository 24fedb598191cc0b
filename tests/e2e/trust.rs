//! Guardian authentication end to end (contract section 1): the real
//! frontend sends nothing to, starts nothing in, and writes no log into a
//! socket directory it does not trust, and refuses a peer of another uid;
//! the real guardian never chmods a directory it did not create and never
//! unlinks a non-socket at its socket path.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Env;
use serde_json::{json, Value};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// An `Initialize` answer that refused the socket at `sock` as untrusted:
/// no release, `owner_unavailable`, and (contract section 3) a detail that
/// names the socket that was tried.
fn assert_untrusted(v: &Value, sock: &Path) {
    assert_eq!(v["temporary_release"]["available"], false, "{v}");
    assert_eq!(v["temporary_release"]["reason"], "owner_unavailable", "{v}");
    let detail = v["temporary_release"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(sock.to_str().unwrap()) && detail.contains("not trusted"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_neither_launches_nor_logs_in_an_open_socket_directory() {
    let env = Env::new();
    let run = env.sock.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mcp = env.mcp(&[]).await;
    let v = mcp.init(&env.ws, "t1").await;
    assert_untrusted(&v, &env.sock);
    assert!(!env.sock.exists(), "no guardian was started");
    assert!(!run.join("guardian.log").exists(), "no log was written");
    assert_eq!(mode(&run), 0o755, "the directory was not repaired behind the user's back");
    mcp.stop().await;
}

#[test]
fn guardian_refuses_an_open_directory_and_a_non_socket_at_its_path() {
    let env = Env::new();
    let run = env.sock.parent().unwrap().to_path_buf();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = env.command(&["guardian", "--socket", env.sock.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mode 0755"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(mode(&run), 0o755, "a directory it did not create is not chmodded");

    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(&env.sock, b"precious").unwrap();
    let out = env.command(&["guardian", "--socket", env.sock.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&env.sock).unwrap(), b"precious", "a non-socket is never unlinked");
}

/// A server of another uid (`nobody`), whose socket is moved into the
/// user's own private directory: the frontend refuses it by `SO_PEERCRED`,
/// reports `owner_unavailable`, and the impostor receives not one byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_sends_nothing_to_a_guardian_of_another_uid() {
    let root = rustix::process::getuid().is_root();
    let tools = Path::new("/usr/bin/setpriv").exists() && Path::new("/usr/bin/python3").exists();
    if !root || !tools {
        eprintln!("skipped: needs root, /usr/bin/setpriv and /usr/bin/python3");
        return;
    }
    let env = Env::new();
    // A directory `nobody` can bind in.
    std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o711)).unwrap();
    let theirs = env.root.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let their_sock = theirs.join("g.sock");
    let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
print("ready", flush=True)
s.settimeout(20)
total = 0
while True:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.settimeout(1)
    try:
        c.sendall(b'{"id":1,"ok":true,"protocol":1,"guardian":"evil","platform":"linux","capabilities":["temporary_release"]}\n')
        while True:
            d = c.recv(65536)
            if not d: break
            total += len(d)
    except OSError:
        pass
    print("conn", total, flush=True)
"#;
    let mut imp = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script])
        .arg(&their_sock)
        .env_clear()
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = imp.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    out.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    // The impostor's socket now sits in the user's own 0700 directory.
    std::fs::rename(&their_sock, &env.sock).unwrap();

    let mcp = env.mcp(&[]).await;
    let v = mcp.init(&env.ws, "t1").await;
    assert_untrusted(&v, &env.sock);
    mcp.stop().await;
    std::thread::sleep(Duration::from_millis(1500));
    let _ = imp.kill();
    let _ = imp.wait();
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    for line in text.lines() {
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "the impostor received bytes: {text}");
    }
    assert!(text.contains("conn"), "the frontend did connect (and then refused): {text}");
}

/// A helper deleted and recreated with the same bytes until its inode
/// number repeats: the token of the first read is refused (`read_required`)
/// and the recreated file survives; a new read releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_token_is_refused_for_a_recreation_under_the_same_inode_number() {
    use std::os::unix::fs::MetadataExt;
    let mut env = Env::new();
    env.start_guardian();
    let mcp = env.mcp(&[]).await;
    mcp.init(&env.ws, "t1").await;
    let h = env.session_dir("t1").join("h.py");
    std::fs::write(&h, b"print('same')\n").unwrap();
    let ino = std::fs::metadata(&h).unwrap().ino();
    let (rev, old_token) = mcp.read_helper("t1", &h).await;
    let mut repeated = false;
    for _ in 0..10_000 {
        std::fs::remove_file(&h).unwrap();
        std::fs::write(&h, b"print('same')\n").unwrap();
        if std::fs::metadata(&h).unwrap().ino() == ino {
            repeated = true;
            break;
        }
    }
    if !repeated {
        eprintln!("skipped: this filesystem did not reuse the inode number");
        mcp.stop().await;
        return;
    }
    let v = mcp.edit(crate::support::release_req("t1", &env.ws, &[(&h, &rev, &old_token)])).await;
    assert_eq!(v["status"], "denied", "{v}");
    assert_eq!(v["errorCode"], "read_required", "{v}");
    assert_eq!(std::fs::read(&h).unwrap(), b"print('same')\n");
    let (rev2, token2) = mcp.read_helper("t1", &h).await;
    assert_eq!(rev2, rev);
    assert_ne!(token2, old_token);
    let v = mcp.edit(crate::support::release_req("t1", &env.ws, &[(&h, &rev2, &token2)])).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(!h.exists());
    mcp.stop().await;
}

/// A guardian answers a new connection at once: between peers its accept
/// loop waits in `poll(2)`. (A fixed 25 ms sleep there once delayed every
/// frontend call: each connect + `hello` in a row took ~25 ms.) The fastest
/// of 20 round trips is compared, so slow ones on a busy machine do not
/// decide.
#[test]
fn guardian_answers_new_connections_without_delay() {
    let mut env = Env::new();
    env.start_guardian();
    let hello = format!("{}\n", json!({"id": 1, "op": "hello", "protocol": 1, "client": "test"}));
    let mut trips: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let mut s = UnixStream::connect(&env.sock).unwrap();
            s.write_all(hello.as_bytes()).unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            assert!(line.contains("\"ok\":true"), "{line}");
            t.elapsed()
        })
        .collect();
    trips.sort();
    // A fixed wait in the accept loop delays every trip, the fastest too;
    // a busy machine delays some. So the fastest of 20 decides.
    let fastest = trips[0];
    assert!(fastest < Duration::from_millis(15), "fastest connect + hello {fastest:?}; all: {trips:?}");
}
