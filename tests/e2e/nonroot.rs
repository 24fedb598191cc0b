//! As a normal user on a machine without a systemd user manager, with the
//! defaults only (no `--socket`, no `XDG_RUNTIME_DIR`): the frontend starts
//! a guardian at `Initialize`, a helper is read and released, a release is
//! refused while a command runs (through MCP and through `winx-release
//! release`), `status` finds the guardian, `guardian --stop` stops it. And
//! the errors a user without `XDG_RUNTIME_DIR` meets name it. The same
//! where `/tmp/winx-<uid>` cannot be the user's (another user made it
//! first; `/tmp` of mode 755, as a tmpfs in a mount namespace of each of
//! the user's commands): the frontend, `status` and `--stop` meet at
//! `D/run/guardian.sock`.
//!
//! Needs root to make the user (`useradd`); skipped with a printed reason
//! otherwise (CI runs as root).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;
use serde_json::{json, Value};

/// Where a test leaves `/tmp` for the user's processes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tmp {
    /// As the machine has it.
    AsItIs,
    /// `/tmp/winx-<uid>` made first by another user (root, mode 0700).
    Squatted,
    /// A tmpfs of mode 755 mounted on `/tmp` in a mount namespace of each
    /// of the user's commands (the world lives in `/var/tmp`).
    Mode755,
}

/// The shell line that mounts a tmpfs of mode 755 on `/tmp`, then runs its
/// arguments.
const TMP_755: &str = "mount -t tmpfs -o mode=0755 tmpfs /tmp && exec \"$@\"";

/// A user made for one test, removed (with its `/tmp/winx-<uid>`) on drop.
struct User {
    name: String,
    uid: u32,
    gid: u32,
    tmp: Tmp,
}

impl User {
    fn make(tmp: Tmp) -> Option<User> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: making a user for the non-root run needs root");
            return None;
        }
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("winxe2e{}x{n}", std::process::id());
        let ok = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", "--user-group", &name])
            .status()
            .expect("useradd");
        assert!(ok.success(), "useradd {name}");
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").arg(flag).arg(&name).output().expect("id");
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("a numeric id")
        };
        let user = User { uid: id("-u"), gid: id("-g"), name, tmp };
        if tmp == Tmp::Squatted {
            fs::create_dir(format!("/tmp/winx-{}", user.uid)).expect("squat /tmp/winx-<uid>");
        }
        Some(user)
    }

    /// What runs `BIN args…` as this user (`/tmp` as `self.tmp` says).
    fn wrapper(&self) -> Vec<String> {
        let mut w: Vec<String> = Vec::new();
        if self.tmp == Tmp::Mode755 {
            w.extend(["unshare", "-m", "--propagation", "private", "sh", "-c", TMP_755, "sh"].map(str::to_owned));
        }
        let ids = ["setpriv", "--reuid", &self.uid.to_string(), "--regid", &self.gid.to_string(), "--clear-groups"];
        w.extend(ids.map(str::to_owned));
        w.push("--".into());
        w
    }

    /// `BIN args…` run as this user in `env`'s world.
    fn command(&self, env: &Env, args: &[&str]) -> Command {
        let w = self.wrapper();
        let mut c = Command::new(&w[0]);
        c.args(&w[1..]).arg(BIN).args(args).envs(env.vars());
        for v in Env::REMOVED {
            c.env_remove(v);
        }
        c
    }

    /// The socket the contract's rule gives this user in `env`:
    /// `/tmp/winx-<uid>/guardian.sock` when that directory is the user's, or
    /// missing in a `/tmp` anyone may write; else `D/run/guardian.sock`.
    fn socket(&self, env: &Env) -> PathBuf {
        use std::os::unix::fs::MetadataExt;
        let tmp = PathBuf::from(format!("/tmp/winx-{}", self.uid));
        let in_tmp = match fs::symlink_metadata(&tmp) {
            Ok(m) => m.is_dir() && m.uid() == self.uid,
            Err(_) => fs::metadata("/tmp").is_ok_and(|m| m.mode() & 0o002 != 0),
        };
        if in_tmp && self.tmp != Tmp::Mode755 {
            tmp.join("guardian.sock")
        } else {
            env.data.join("run").join("guardian.sock")
        }
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(format!("/tmp/winx-{}", self.uid));
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

fn chown_tree(root: &Path, uid: u32, gid: u32) {
    let ok = Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(root).status().unwrap().success();
    assert!(ok, "chown -R {}", root.display());
}

fn json_of(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {} / {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_user_without_systemd_runs_on_the_defaults() {
    on_the_defaults(Tmp::AsItIs).await;
}

/// Another user made `/tmp/winx-<uid>` first: the user's processes meet at
/// `D/run/guardian.sock` (on c4cb753 the frontend answered
/// `owner_unavailable`, the directory not being the user's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_user_whose_tmp_dir_another_user_made_meets_in_the_data_dir() {
    on_the_defaults(Tmp::Squatted).await;
}

/// `/tmp` of mode 755 (a tmpfs in a mount namespace of each of the user's
/// commands): the user's processes meet at `D/run/guardian.sock` (on
/// c4cb753: "launch: /tmp/winx-<uid>: Permission denied"). Skipped where
/// mount namespaces cannot be made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_normal_user_whose_tmp_is_not_writable_meets_in_the_data_dir() {
    let probe =
        Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", TMP_755, "sh", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot mount a tmpfs on /tmp in a mount namespace here (unshare -m)");
        return;
    }
    // The tmpfs hides whatever lies under /tmp, the binary of a checkout there included.
    let bin = Path::new(env!("CARGO_BIN_EXE_winx-release"));
    if bin.starts_with("/tmp") {
        eprintln!("skipped: the binary under test is below /tmp ({}), which the test's tmpfs hides", bin.display());
        return;
    }
    on_the_defaults(Tmp::Mode755).await;
}

async fn on_the_defaults(tmp: Tmp) {
    let Some(user) = User::make(tmp) else { return };
    // The world is dropped (its processes ended) before the user is removed.
    let env = if tmp == Tmp::Mode755 { Env::new_in(Path::new("/var/tmp")) } else { Env::new() };
    chown_tree(&env.root, user.uid, user.gid);
    let wrapper = user.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mcp = env.mcp_full(&wrapper, None, &[], &[]).await;

    let init = mcp.init(&env.ws, "u").await;
    assert_eq!(init["temporary_release"]["available"], true, "{init}");
    assert_eq!(init["guardian"]["socket"], json!(user.socket(&env)), "{init}");
    if tmp != Tmp::AsItIs {
        assert_eq!(user.socket(&env), env.data.join("run/guardian.sock"));
    }
    let note = init["message"].as_str().unwrap_or_default();
    assert!(note.contains("outlives this frontend") && note.contains("winx-release guardian --stop"), "{init}");

    let (path, rev, token) = helper(&env, &mcp, "u", "h.py", "print(1)").await;
    let done = mcp.edit(release_req("u", &env.ws, &[(&path, &rev, &token)])).await;
    assert_completed(&done, &[&path]);

    // A command runs: releases are refused, through MCP and the operator
    // command.
    let gate = env.root.join("gate");
    let cmd = format!("while [ ! -e '{}' ]; do sleep 0.05; done", p(&gate));
    let bg = mcp.call("BashCommand", json!({"thread_id": "u", "command": cmd, "is_background": true})).await;
    assert_eq!(bg["status"], "running", "{bg}");
    let (path2, rev2, token2) = helper(&env, &mcp, "u", "h2.txt", "two").await;
    let refused = mcp.edit(release_req("u", &env.ws, &[(&path2, &rev2, &token2)])).await;
    assert_eq!((refused["status"].clone(), refused["errorCode"].clone()), (json!("denied"), json!("execution_active")));
    let out = user.command(&env, &["release", "--workspace", p(&env.ws), "--thread", "u", "--all", "--json"]).output();
    let v = json_of(&out.unwrap());
    assert_eq!(v["files"][0]["reason"], "execution_active", "{v}");
    assert!(path2.exists());

    // status finds it on the default socket; --stop is refused while the
    // command runs.
    let st = json_of(&user.command(&env, &["status", "--json"]).output().unwrap());
    assert_eq!((st["running"].clone(), st["socket"].clone()), (json!(true), json!(user.socket(&env))), "{st}");
    assert_eq!(st["running_executions"].as_array().map(Vec::len), Some(1), "{st}");
    let out = user.command(&env, &["guardian", "--stop"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // Without XDG_RUNTIME_DIR, `--socket "$XDG_RUNTIME_DIR/winx/..."` is
    // /winx/...: the error says so, and what the default is.
    let out = user.command(&env, &["guardian", "--socket", "/winx/guardian.sock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("XDG_RUNTIME_DIR is not set") && err.contains(p(&user.socket(&env))), "{err}");
    let out = user.command(&env, &["guardian"]).env("XDG_RUNTIME_DIR", "/nonexistent-runtime-dir").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("XDG_RUNTIME_DIR=/nonexistent-runtime-dir"), "{err}");

    // The command ends: the release goes through, then the guardian stops.
    fs::write(&gate, b"").unwrap();
    let (path2, rev2, token2) = (path2.clone(), rev2, token2);
    let mut released = Value::Null;
    for _ in 0..200 {
        released = mcp.edit(release_req("u", &env.ws, &[(&path2, &rev2, &token2)])).await;
        if released["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_completed(&released, &[&path2]);
    // A background shell ends with its command: it was at its prompt for the
    // release, then exits, and its record stays unresolved (a stop blocker:
    // what it left may run) until the guardian has reaped it. So the stop
    // may be refused for that moment, never for longer.
    let mut out = user.command(&env, &["guardian", "--stop"]).output().unwrap();
    for _ in 0..100 {
        if out.status.code() == Some(0) || !String::from_utf8_lossy(&out.stderr).contains("execution_active") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        out = user.command(&env, &["guardian", "--stop"]).output().unwrap();
    }
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!user.socket(&env).exists());
    mcp.stop().await;
    drop(env);
}

/// Four frontends of one normal user, each releasing 20 helpers of its own
/// thread at the same moment, ten times: every release completes. Nothing
/// but the guardian and the frontends touches the helpers, so no release may
/// be refused `in_use` by a process the sweep could not read that cannot
/// hold them: here a process of the user that exited and that its parent
/// has not reaped yet (as a stopped guardian waits for `init`, or a user
/// whose uid an earlier user had). Its `/proc/<pid>/fd` and `maps` are
/// root's, and on c4cb753 every release was refused ("descriptors or
/// mappings cannot be read"; with the rest of a suite, now and then).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_frontends_of_one_user_release_at_once_ten_times() {
    let Some(user) = User::make(Tmp::AsItIs) else { return };
    let env = Env::new();
    chown_tree(&env.root, user.uid, user.gid);
    // A process of the user that has exited, left unreaped until the end.
    let mut zombie = user.command(&env, &["--version"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    let stat = format!("/proc/{}/stat", zombie.id());
    eventually(10, "the user's process to exit", || {
        fs::read_to_string(&stat).is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
    });
    let wrapper = user.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let threads = ["f0", "f1", "f2", "f3"];
    let mut mcps = Vec::new();
    for t in threads {
        let mcp = env.mcp_full(&wrapper, None, &[], &[]).await;
        let init = mcp.init(&env.ws, t).await;
        assert_eq!(init["temporary_release"]["available"], true, "{init}");
        mcps.push(mcp);
    }
    for round in 0..10 {
        let mut reqs = Vec::new();
        let mut all_paths = Vec::new();
        for (mcp, t) in mcps.iter().zip(threads) {
            mcp.bash(t, &format!("for i in $(seq 1 20); do echo \"{round} $i $RANDOM\" > $WINX_TEMP_DIR/h$i.py; done"))
                .await;
            let paths: Vec<PathBuf> = (1..=20).map(|i| env.session_dir(t).join(format!("h{i}.py"))).collect();
            reqs.push(read_then_release_req(&env, mcp, t, &paths).await);
            all_paths.push(paths);
        }
        let (a, b, c, d) = tokio::join!(
            mcps[0].edit(reqs[0].clone()),
            mcps[1].edit(reqs[1].clone()),
            mcps[2].edit(reqs[2].clone()),
            mcps[3].edit(reqs[3].clone())
        );
        for (v, paths) in [a, b, c, d].iter().zip(&all_paths) {
            let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
            assert_eq!(v["status"], "completed", "round {round}: {v}");
            assert_completed(v, &refs);
        }
    }
    for mcp in mcps {
        mcp.stop().await;
    }
    let _ = user.command(&env, &["guardian", "--stop", "--force"]).output();
    zombie.wait().unwrap();
    drop(env);
}
