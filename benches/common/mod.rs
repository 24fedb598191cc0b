//! Fixtures shared by the benches: trees of a given size with 16-level
//! chains, helper files, and the `find` baseline.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use winx_release_engine::rehash::sha256_fd;
use winx_release_engine::{Identity, Layout, Pin, Target};

/// The baseline of the release and cache benches: `find ROOTS -printf
/// '%D %i\n'` (device and inode of every entry, what a lean scan learns),
/// its output to a pipe and dropped.
pub fn find(roots: &[PathBuf]) {
    let out = Command::new("find")
        .args(roots)
        .args(["-printf", "%D %i\n"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.stdout.is_empty());
}

/// Directories per chain.
pub const CHAIN_DEPTH: usize = 16;

/// Whether this is a smoke run: `cargo test --all-targets` runs each bench
/// binary without `--bench` (which `cargo bench` passes). A smoke run does
/// one small round of every bench, so CI proves the benches run without
/// paying for the measurement.
pub fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

/// Where bench trees live: `$WINX_BENCH_DIR`, else a per-user directory
/// in the system temporary directory. Trees are kept between runs (each is
/// marked complete by a `<name>.done` file beside it).
pub fn cache_dir() -> PathBuf {
    let dir = std::env::var_os("WINX_BENCH_DIR").map(PathBuf::from).unwrap_or_else(|| {
        std::env::temp_dir().join(format!("winx-bench-trees-{}", rustix::process::getuid().as_raw()))
    });
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The shape of a tree of `total` entries: `chains` chains of
/// [`CHAIN_DEPTH`] nested directories; every directory but the deepest of
/// each chain holds `per_dir` files (so no file is deeper than 16); `top`
/// more files at the root make the count exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub chains: usize,
    pub per_dir: usize,
    pub top: usize,
}

pub fn shape(total: usize) -> Shape {
    let chains = (total / 780).max(1);
    let dirs = chains * CHAIN_DEPTH;
    let file_dirs = chains * (CHAIN_DEPTH - 1);
    let per_dir = (total - dirs) / file_dirs;
    let top = total - dirs - per_dir * file_dirs;
    Shape { chains, per_dir, top }
}

/// Writes a tree of exactly `total` entries at `root` (which must not
/// exist). Files have 0–99 bytes.
pub fn write_tree(root: &Path, total: usize) {
    let s = shape(total);
    fs::create_dir_all(root).unwrap();
    let data = [b'x'; 100];
    for c in 0..s.chains {
        let mut p = root.to_path_buf();
        for d in 1..=CHAIN_DEPTH {
            p.push(format!("c{c}d{d}"));
            fs::create_dir(&p).unwrap();
            if d < CHAIN_DEPTH {
                for f in 0..s.per_dir {
                    fs::write(p.join(format!("f{f}")), &data[..(f * 7) % 100]).unwrap();
                }
            }
        }
    }
    for f in 0..s.top {
        fs::write(root.join(format!("top{f}")), data).unwrap();
    }
}

/// A cached tree of `total` entries named `name` in [`cache_dir`]:
/// created on first use.
pub fn cached_tree(name: &str, total: usize) -> PathBuf {
    let root = cache_dir().join(name);
    cached_tree_at(&root, total);
    root
}

/// Makes `root` a tree of `total` entries unless a previous run already
/// did (`<root>.done` records it).
pub fn cached_tree_at(root: &Path, total: usize) {
    let done = PathBuf::from(format!("{}.done", root.display()));
    let spec = format!("{total} {:?}\n", shape(total));
    if fs::read_to_string(&done).ok().as_deref() != Some(spec.as_str()) {
        let _ = fs::remove_file(&done);
        if root.exists() {
            fs::remove_dir_all(root).unwrap();
        }
        eprintln!("creating {total}-entry tree at {}", root.display());
        write_tree(root, total);
        fs::File::create(&done).unwrap().write_all(spec.as_bytes()).unwrap();
    }
}

/// Sizes of `n` helpers averaging `mean` bytes (from `mean / 4` to
/// `7 * mean / 4`, deterministic).
pub fn helper_sizes(n: usize, mean: usize) -> Vec<usize> {
    (0..n).map(|i| mean / 4 + (i * 7919) % (3 * mean / 2 + 1)).collect()
}

/// Deterministic helper content.
pub fn helper_bytes(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k.wrapping_mul(31) ^ i) as u8).collect()
}

/// `n` child `sleep 600` processes of this user, killed and reaped when
/// dropped: the extra processes a `/proc` sweep or snapshot reads.
pub struct Sleepers(Vec<std::process::Child>);

impl Sleepers {
    /// Starts them.
    pub fn start(n: usize) -> Sleepers {
        Sleepers(
            (0..n)
                .map(|_| Command::new("sleep").arg("600").stdin(Stdio::null()).stdout(Stdio::null()).spawn().unwrap())
                .collect(),
        )
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The workspace of the warm-release benches (`release_by_processes`,
/// `release_load`), in [`cache_dir`] under `name`: a `.winx/scratch`
/// backing root of `backing` entries (cached between runs) and a data
/// root.
pub fn release_layout(name: &str, backing: usize) -> Layout {
    let base = fs::canonicalize(cache_dir()).unwrap().join(name);
    let ws = base.join("ws");
    let data = base.join("data");
    fs::create_dir_all(ws.join(".winx")).unwrap();
    fs::create_dir_all(data.join("executions")).unwrap();
    cached_tree_at(&ws.join(".winx/scratch"), backing);
    Layout::new(&ws, &data).unwrap()
}

/// Creates the session directory of `thread` (mode 0700) and returns it.
pub fn session_dir(layout: &Layout, thread: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let session = layout.session_dir(thread);
    fs::create_dir_all(&session).unwrap();
    fs::set_permissions(&session, fs::Permissions::from_mode(0o700)).unwrap();
    session
}

/// Writes helper `i` (4 KiB, `procs-<i>.py`) in `session` and pins it:
/// the one target of a release.
pub fn pinned_helper(session: &Path, i: usize) -> Vec<Target> {
    let p = session.join(format!("procs-{i}.py"));
    fs::write(&p, helper_bytes(i, 4096)).unwrap();
    let f = fs::File::open(&p).unwrap();
    let pin = Pin::new(&Identity::of_fd(&f).unwrap(), sha256_fd(&f).unwrap().0);
    vec![Target::new(&p, pin)]
}
