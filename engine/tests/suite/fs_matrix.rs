//! The filesystem matrix: a release, an alias (a hard link, and a bind
//! mount into a backing root), `in_use` (a process that only maps the
//! helper) and scan parity (io_uring against the synchronous backend, lean
//! and full) on ext4, xfs, btrfs (the workspace a subvolume), tmpfs and
//! overlayfs.
//!
//! Each filesystem is made by the test: ext4, xfs and btrfs on a sparse
//! image through a loop device, tmpfs and overlayfs directly. Everything is
//! mounted in a private mount namespace of one thread, so every mount goes
//! away with that thread whatever happens; a loop device is detached right
//! after its mount (autoclear), so it is freed with the mount. Needs root;
//! a filesystem that cannot be made here (no tool, no loop device, no
//! kernel support) is skipped with a printed reason. `.ci/run` installs
//! `xfsprogs` and `btrfs-progs` when missing.

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::no_fork_now;
use crate::common::ns::{in_mount_namespace, is_root, mount};
use crate::common::target;
use winx_release_engine::admission::Admission;
use winx_release_engine::layout::Layout;
use winx_release_engine::owner::IdleOwner;
use winx_release_engine::release::{release, Outcome, ReleaseOptions, ReleaseReport, ReleaseRequest, Status, Target};
use winx_release_engine::scan::{
    scan_paths_with, ScanBackend, ScanLimits, ScanMode, ScanReport, SyncBackend, ThreadsBackend, UringBackend,
};
use winx_release_engine::{PhysicalId, Reason};

/// Runs a command quietly; `Err` names it and why it failed.
fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = {
        let _forking = no_fork_now();
        Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?
    };
    if !out.status.success() {
        return Err(format!("{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Makes `fstype` on a sparse image of `mib` MiB in `dir` and mounts it at
/// `at` through a loop device (detached at once: it goes with the mount).
fn loop_mount(dir: &Path, fstype: &str, mkfs: &[&str], mib: u64, at: &Path) -> Result<(), String> {
    let img = dir.join(format!("{fstype}.img"));
    fs::File::create(&img).and_then(|f| f.set_len(mib << 20)).map_err(|e| format!("image: {e}"))?;
    let img_s = img.to_str().unwrap();
    let mut args = mkfs[1..].to_vec();
    args.push(img_s);
    run(mkfs[0], &args)?;
    let dev = run("losetup", &["--find", "--show", img_s])?;
    let mounted = mount(Some(Path::new(&dev)), at, Some(fstype), 0, None).map_err(|e| format!("mount {fstype}: {e}"));
    // Autoclear: the loop device is freed once its mount is gone.
    let _ = run("losetup", &["-d", &dev]);
    mounted
}

/// One release world on a mounted filesystem: workspace `W`, data
/// directory `D`, one session.
struct World {
    layout: Layout,
    thread: String,
    session: PathBuf,
}

impl World {
    fn new(ws: PathBuf, data: PathBuf) -> World {
        fs::create_dir_all(&ws).unwrap();
        fs::create_dir_all(&data).unwrap();
        let layout = Layout::new(&ws, &data).unwrap();
        let thread = "matrix".to_owned();
        let session = layout.session_dir(&thread);
        fs::create_dir_all(&session).unwrap();
        fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();
        fs::create_dir_all(ws.join(".winx/scratch")).unwrap();
        fs::create_dir_all(data.join("executions/e1")).unwrap();
        fs::create_dir_all(data.join("receipts")).unwrap();
        World { layout, thread, session }
    }

    fn helper(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.session.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    fn release(&self, targets: &[Target]) -> ReleaseReport {
        let req = ReleaseRequest { layout: &self.layout, thread_id: &self.thread, targets };
        let _no_fork = no_fork_now();
        release(&req, &Admission::new().enter(), &IdleOwner, &ReleaseOptions::default())
    }
}

/// A child process that maps `path` with `mmap(2)` itself and closes its
/// one descriptor: only its mapping holds the file. (Python's `mmap`
/// module keeps a duplicate of the descriptor, which a descriptor table
/// shows: on overlayfs, where the lease does not see a mapping, that
/// duplicate had hidden a release of a mapped helper.)
fn mapper(path: &Path) -> Option<Child> {
    let script = "import ctypes,os,sys\n\
                  libc=ctypes.CDLL(None,use_errno=True)\n\
                  libc.mmap.restype=ctypes.c_void_p\n\
                  libc.mmap.argtypes=[ctypes.c_void_p,ctypes.c_size_t,ctypes.c_int,ctypes.c_int,ctypes.c_int,ctypes.c_long]\n\
                  fd=os.open(sys.argv[1],os.O_RDONLY)\n\
                  p=libc.mmap(None,os.fstat(fd).st_size,1,2,fd,0)\n\
                  assert p not in (None,ctypes.c_void_p(-1).value)\n\
                  os.close(fd)\n\
                  assert not [n for n in os.listdir('/proc/self/fd') if os.path.realpath('/proc/self/fd/'+n)==os.path.realpath(sys.argv[1])]\n\
                  print('mapped',flush=True)\n\
                  sys.stdin.read()\n";
    python_holder(script, path, "mapped")
}

/// A child process in which a thread unshares its descriptor table and
/// opens `path` with `O_PATH` there: no lease sees it, and only that
/// thread's table (`/proc/<pid>/task/<tid>/fd`) shows it.
fn thread_path_holder(path: &Path) -> Option<Child> {
    let script = "import ctypes,os,sys,threading\n\
                  libc=ctypes.CDLL(None,use_errno=True)\n\
                  def t():\n\
                  \x20assert libc.unshare(0x400)==0\n\
                  \x20fd=os.open(sys.argv[1],os.O_PATH)\n\
                  \x20print('held',flush=True)\n\
                  \x20sys.stdin.read()\n\
                  th=threading.Thread(target=t)\n\
                  th.start()\n\
                  th.join()\n";
    python_holder(script, path, "held")
}

/// Runs `python3 -c script path` and waits for it to print `ready`.
fn python_holder(script: &str, path: &Path, ready: &str) -> Option<Child> {
    let _forking = no_fork_now();
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take()?).read_line(&mut line).ok()?;
    (line.trim() == ready).then_some(child)
}

/// A helper `file` that the child `holder` starts holds is refused
/// `in_use` and stays (skipped, saying `why`, where no holder can start).
fn held_is_in_use(name: &str, w: &World, file: &str, holder: fn(&Path) -> Option<Child>, why: &str) {
    let h = w.helper(file, file.as_bytes());
    let Some(mut child) = holder(&h) else {
        eprintln!("{name}: {file} check skipped: {why}");
        return;
    };
    let r = w.release(&[target(&h)]);
    drop(child.stdin.take());
    let _ = child.wait();
    assert_eq!((r.status, r.error_code), (Status::Denied, Some(Reason::InUse)), "{name}: {r:?}");
    assert!(h.exists(), "{name}");
}

/// What must agree between backends.
fn verdict(r: &ScanReport) -> (Option<Reason>, Option<PathBuf>, u64, u64, u64, Option<u64>) {
    (r.reason, r.path.clone(), r.entries, r.directories, r.files, r.bytes)
}

/// The four checks on one mounted world; `name` labels failures.
fn checks(name: &str, w: &World) {
    // 1. A release.
    let h = w.helper("released.py", &vec![b'x'; 10_000]);
    let r = w.release(&[target(&h)]);
    assert_eq!(r.status, Status::Completed, "{name}: {r:?}");
    // btrfs frees blocks later; on overlayfs a granted lease does not rule
    // out a mapping of the layer's file, so nothing is counted as freed.
    assert!(r.bytes_reclaimed > 0 || name == "btrfs" || name == "overlayfs", "{name}: {r:?}");
    assert!(!h.exists(), "{name}");

    // 2a. A hard link into a backing root (the scratch root: on btrfs the
    // data directory is another subvolume, where no link can reach).
    let h = w.helper("linked.py", b"linked");
    let link = w.layout.workspace().join(".winx/scratch/linked");
    fs::hard_link(&h, &link).unwrap();
    let r = w.release(&[target(&h)]);
    assert_eq!((r.status, r.error_code), (Status::Denied, Some(Reason::Hardlink)), "{name}: {r:?}");
    assert!(h.exists(), "{name}");
    fs::remove_file(&link).unwrap();

    // 2b. The helper bind-mounted onto a file in a backing root.
    let h = w.helper("bound.py", b"bound");
    let covered = w.layout.workspace().join(".winx/scratch/dropped.txt");
    fs::write(&covered, b"placeholder").unwrap();
    let t = target(&h);
    mount(Some(&h), &covered, None, libc::MS_BIND, None).unwrap();
    let r = w.release(std::slice::from_ref(&t));
    assert_eq!((r.status, r.error_code), (Status::Denied, Some(Reason::BackingAlias)), "{name}: {r:?}");
    assert!(r.files.iter().all(|f| f.outcome == Outcome::Denied), "{name}");
    crate::common::ns::detach(&covered).unwrap();
    // A lazy unmount lets go of the mount's reference to the helper a
    // moment later (the last `mntput` is deferred): until then the kernel
    // refuses the write lease and the release is `in_use`, nothing else.
    let mut r = w.release(std::slice::from_ref(&t));
    for _ in 0..100 {
        if r.status == Status::Completed {
            break;
        }
        assert_eq!((r.status, r.error_code), (Status::Denied, Some(Reason::InUse)), "{name}: after the unmount: {r:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        r = w.release(std::slice::from_ref(&t));
    }
    assert_eq!(r.status, Status::Completed, "{name}: after the unmount: {r:?}");

    // 3. A process that only maps the helper.
    held_is_in_use(name, w, "mapped.py", mapper, "python3 cannot map a file here");

    // 3b. Where a granted lease does not rule out a holder (overlayfs),
    // every thread's own table is read: an `O_PATH` descriptor in a thread
    // that unshared its table holds the helper. (Where the lease rules out
    // every other open file description, such a holder is not looked for:
    // docs/DESIGN.md, "The in-use check".)
    if name == "overlayfs" {
        held_is_in_use(name, w, "thread.py", thread_path_holder, "python3 cannot unshare a table here");
    }

    // 4. Scan parity: every backend, both modes, a tree with an alias and
    // without.
    let root = w.layout.data_dir().join("executions");
    for i in 0..30 {
        let d = root.join(format!("e{i}/sub"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("output"), vec![b'o'; i * 100]).unwrap();
        fs::write(root.join(format!("e{i}/status.json")), b"{}").unwrap();
    }
    let alias_at = root.join("e7/sub/alias");
    fs::write(&alias_at, b"alias").unwrap();
    let m = fs::metadata(&alias_at).unwrap();
    let aliases: HashSet<PhysicalId> = [PhysicalId { dev: m.dev(), ino: m.ino() }].into();
    let threads = ThreadsBackend::new(2);
    let uring = UringBackend::default();
    let backends: [(&str, &dyn ScanBackend); 3] = [("sync", &SyncBackend), ("uring", &uring), ("threads", &threads)];
    for set in [HashSet::new(), aliases] {
        for mode in [ScanMode::Lean, ScanMode::Sizes] {
            let want =
                verdict(&scan_paths_with(&SyncBackend, std::slice::from_ref(&root), ScanLimits::default(), &set, mode));
            for (b, backend) in &backends {
                let got = scan_paths_with(*backend, std::slice::from_ref(&root), ScanLimits::default(), &set, mode);
                assert_eq!(verdict(&got), want, "{name}: {b} {mode:?} differs from sync");
            }
            let alias = !set.is_empty();
            assert_eq!(want.0, alias.then_some(Reason::BackingAlias), "{name} {mode:?}: {want:?}");
        }
    }
}

/// Mounts one filesystem in a private namespace with `make` (which returns
/// the workspace and data directory to use), runs the checks, or prints why
/// it was skipped.
fn matrix(name: &'static str, make: impl FnOnce(&Path) -> Result<(PathBuf, PathBuf), String> + Send + 'static) {
    if !is_root() {
        eprintln!("{name}: skipped: making and mounting filesystems needs root");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(t.path()).unwrap();
    let ran = in_mount_namespace(move || {
        let (ws, data) = make(&base)?;
        checks(name, &World::new(ws, data));
        Ok::<(), String>(())
    });
    match ran {
        None => eprintln!("{name}: skipped: cannot make a private mount namespace here"),
        Some(Err(why)) => eprintln!("{name}: skipped: {why}"),
        Some(Ok(())) => eprintln!("{name}: release, alias, in_use and scan parity checked"),
    }
}

fn mount_point(base: &Path) -> PathBuf {
    let m = base.join("mnt");
    fs::create_dir_all(&m).unwrap();
    m
}

#[test]
fn ext4() {
    matrix("ext4", |base| {
        let m = mount_point(base);
        loop_mount(base, "ext4", &["mkfs.ext4", "-q", "-F"], 64, &m)?;
        Ok((m.join("ws"), m.join("data")))
    });
}

#[test]
fn xfs() {
    matrix("xfs", |base| {
        let m = mount_point(base);
        loop_mount(base, "xfs", &["mkfs.xfs", "-q", "-f"], 320, &m)?;
        Ok((m.join("ws"), m.join("data")))
    });
}

/// The workspace is a btrfs subvolume (its own device number), the data
/// directory on the top-level subvolume.
#[test]
fn btrfs() {
    matrix("btrfs", |base| {
        let m = mount_point(base);
        loop_mount(base, "btrfs", &["mkfs.btrfs", "-q", "-f"], 128, &m)?;
        let ws = m.join("ws");
        run("btrfs", &["-q", "subvolume", "create", ws.to_str().unwrap()])?;
        Ok((ws, m.join("data")))
    });
}

#[test]
fn tmpfs() {
    matrix("tmpfs", |base| {
        let m = mount_point(base);
        mount(Some(Path::new("tmpfs")), &m, Some("tmpfs"), 0, Some("size=64m")).map_err(|e| format!("tmpfs: {e}"))?;
        Ok((m.join("ws"), m.join("data")))
    });
}

#[test]
fn overlayfs() {
    matrix("overlayfs", |base| {
        let (lower, upper, work, merged) = (base.join("l"), base.join("u"), base.join("w"), mount_point(base));
        for d in [&lower, &upper, &work] {
            fs::create_dir_all(d).unwrap();
        }
        let opts = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        mount(Some(Path::new("overlay")), &merged, Some("overlay"), 0, Some(&opts))
            .map_err(|e| format!("overlay: {e}"))?;
        Ok((merged.join("ws"), merged.join("data")))
    });
}
