//! A private directory for real guardian and frontend processes: their
//! `XDG_DATA_HOME`, `HOME`, workspaces and socket all inside it, so that
//! nothing of the user's is touched or found.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A private temporary directory, removed on drop unless kept.
///
/// Its layout: `ws/` (workspaces), `data/` (`XDG_DATA_HOME`, whose `winx`
/// is the data directory `D`, not made here), `home/` (`HOME`), and
/// `run/` (mode 0700, as a guardian socket's directory must be) with the
/// socket path `run/g.sock`.
pub struct PrivateDirs {
    /// Its root (canonical).
    pub root: PathBuf,
    /// `root/ws`, where workspaces live.
    pub ws: PathBuf,
    /// `XDG_DATA_HOME` of every child: `root/data`.
    pub data_home: PathBuf,
    /// The data directory `D` = `XDG_DATA_HOME/winx`.
    pub data: PathBuf,
    /// `HOME` of every child.
    pub home: PathBuf,
    /// The guardian socket.
    pub sock: PathBuf,
    temp: Option<tempfile::TempDir>,
}

impl PrivateDirs {
    /// Variables a child does not inherit: with them unset, it finds no
    /// guardian or runtime directory outside the private directory.
    pub const REMOVED: [&'static str; 2] = ["WINX_GUARDIAN_SOCKET", "XDG_RUNTIME_DIR"];

    /// Creates a directory named `<prefix>…` below `base` (default: the
    /// system temporary directory) and its layout.
    pub fn create(prefix: &str, base: Option<&Path>) -> io::Result<PrivateDirs> {
        let base = base.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let temp = tempfile::Builder::new().prefix(prefix).tempdir_in(&base)?;
        let root = std::fs::canonicalize(temp.path())?;
        let dirs = PrivateDirs {
            ws: root.join("ws"),
            data_home: root.join("data"),
            data: root.join("data").join("winx"),
            home: root.join("home"),
            sock: root.join("run").join("g.sock"),
            root,
            temp: Some(temp),
        };
        for d in [&dirs.ws, &dirs.data_home, &dirs.home] {
            std::fs::create_dir_all(d)?;
        }
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(dirs.root.join("run"))?;
        Ok(dirs)
    }

    /// The variables every child gets: `XDG_DATA_HOME` and `HOME`.
    pub fn vars(&self) -> [(&'static str, &Path); 2] {
        [("XDG_DATA_HOME", &self.data_home), ("HOME", &self.home)]
    }

    /// A command running `program args` with [`PrivateDirs::vars`] set and
    /// [`PrivateDirs::REMOVED`] unset; through `wrapper` when it is not
    /// empty (a command that execs its arguments, such as `unshare -m --`).
    pub fn command<S: AsRef<OsStr>>(&self, wrapper: &[&str], program: &Path, args: &[S]) -> Command {
        let mut cmd = match wrapper.split_first() {
            None => Command::new(program),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
        };
        cmd.args(args).envs(self.vars());
        for v in PrivateDirs::REMOVED {
            cmd.env_remove(v);
        }
        cmd
    }

    /// Keeps the directory after the run instead of removing it; returns
    /// its root.
    pub fn keep(&mut self) -> PathBuf {
        if let Some(t) = self.temp.take() {
            let _ = t.keep();
        }
        self.root.clone()
    }

    /// Removes the directory now (also done on drop unless kept).
    pub fn remove(&mut self) {
        if let Some(t) = self.temp.take() {
            let _ = t.close();
        }
    }
}
