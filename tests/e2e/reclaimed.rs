//! `bytes_reclaimed` is what the removal freed (contract section 3,
//! `released`): a helper whose `O_PATH` descriptor is in flight over
//! `SCM_RIGHTS`, and one bind-mounted outside the session, are released
//! with 0, and their holders still read every byte; a helper nothing else
//! holds, released in the same request, counts its blocks.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::{release_req, world, Env, Mcp};

/// Bytes of each helper (the 61440: 15 blocks of 4 KiB).
const SIZE: usize = 61_440;

/// Writes a helper of `thread` with `SIZE` bytes and reads it: (path,
/// revision, generation, allocated bytes).
async fn big_helper(env: &Env, mcp: &Mcp, thread: &str, name: &str, byte: u8) -> (PathBuf, String, String, u64) {
    let path = env.session_dir(thread).join(name);
    std::fs::write(&path, vec![byte; SIZE]).unwrap();
    let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
    let (rev, generation) = mcp.read_helper(thread, &path).await;
    (path, rev, generation, allocated)
}

/// Releases `held` and `free` in one request; expects both released, `held`
/// with 0 bytes and `free` with its blocks.
async fn release_both(
    env: &Env,
    mcp: &Mcp,
    held: &(PathBuf, String, String, u64),
    free: &(PathBuf, String, String, u64),
) {
    let req = release_req("t1", &env.ws, &[(&held.0, &held.1, &held.2), (&free.0, &free.1, &free.2)]);
    let v = mcp.edit(req).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!((&v["files"][0]["outcome"], &v["files"][1]["outcome"]), (&"released".into(), &"released".into()));
    assert_eq!(v["files"][0]["bytes_reclaimed"], 0, "blocks another reference keeps were counted: {v}");
    assert_eq!(v["files"][1]["bytes_reclaimed"], free.3, "{v}");
    assert_eq!(v["bytes_reclaimed"], free.3, "{v}");
    assert!(!held.0.exists() && !free.0.exists());
}

/// The holder's answer once told to go on: the number of bytes it read.
fn bytes_read_by(mut holder: Child) -> usize {
    holder.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut out = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut out).unwrap();
    assert!(holder.wait().unwrap().success(), "holder: {out}");
    out.trim().parse().unwrap_or_else(|_| panic!("holder said {out:?}"))
}

/// Starts `program` (python3 or sh, by `argv`) that prints `ready` once it
/// holds the helper, then waits for a line on its standard input.
fn holder(argv: &[&str]) -> Child {
    let mut child =
        Command::new(argv[0]).args(&argv[1..]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut line = String::new();
    // One byte at a time: what follows `ready` stays in the pipe.
    let mut b = [0u8];
    while out.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
        line.push(b[0] as char);
    }
    assert_eq!(line.trim(), "ready", "holder {argv:?}");
    child.stdout = Some(out);
    child
}

/// An `O_PATH` descriptor in flight (sent, not yet received; the sender's
/// own closed): the lease does not count `O_PATH`, no table shows it, so the
/// release goes through; the receiver later reopens the removed file
/// through `/proc/self/fd` and reads every byte. Its removal freed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_o_path_descriptor_in_flight_keeps_the_blocks_and_counts_zero() {
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let held = big_helper(&env, &mcp, "t1", "sent.bin", b's').await;
    let free = big_helper(&env, &mcp, "t1", "free.bin", b'f').await;
    let program = "import os,socket,sys\n\
a,b=socket.socketpair()\n\
fd=os.open(sys.argv[1],os.O_PATH)\n\
socket.send_fds(a,[b'x'],[fd])\n\
os.close(fd)\n\
print('ready',flush=True)\n\
sys.stdin.readline()\n\
_,fds,_,_=socket.recv_fds(b,1,1)\n\
r=os.open('/proc/self/fd/%d'%fds[0],os.O_RDONLY)\n\
print(len(os.read(r,1<<20)),flush=True)\n";
    let h = holder(&["python3", "-c", program, held.0.to_str().unwrap()]);
    release_both(&env, &mcp, &held, &free).await;
    assert_eq!(bytes_read_by(h), SIZE, "the receiver reads every byte of the released helper");
    mcp.stop().await;
}

/// A bind mount of the helper outside the session, in a mount namespace of
/// its own (so nothing leaks): the mount still serves every byte after the
/// release, which freed nothing. Needs a mount namespace (root, or skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_mount_elsewhere_keeps_the_blocks_and_counts_zero() {
    let probe = Command::new("unshare").args(["-m", "--propagation", "private", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("SKIPPED: cannot make a mount namespace here (unshare -m)");
        return;
    }
    let (env, mcp) = world().await;
    mcp.init(&env.ws, "t1").await;
    let held = big_helper(&env, &mcp, "t1", "mounted.bin", b'm').await;
    let free = big_helper(&env, &mcp, "t1", "free.bin", b'f').await;
    let at = env.root.join("x");
    std::fs::write(&at, b"").unwrap();
    let script = "mount --bind \"$1\" \"$2\" && echo ready && read _ && wc -c < \"$2\"";
    let argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", p(&held.0), p(&at)];
    let h = holder(&argv);
    release_both(&env, &mcp, &held, &free).await;
    assert_eq!(bytes_read_by(h), SIZE, "the bind mount serves every byte of the released helper");
    mcp.stop().await;
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}
