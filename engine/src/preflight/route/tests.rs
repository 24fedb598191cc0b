use super::*;
use crate::Layout;
use rustix::io::Errno;
use std::os::unix::fs::{symlink, MetadataExt};

struct Fx {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    session: PathBuf,
}

fn fx() -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let layout = Layout::new(&ws, root.join("data")).unwrap();
    layout.create_session_dir("t1").unwrap();
    let session = layout.session_dir("t1");
    Fx { _tmp: tmp, ws, session }
}

fn session_of(path: &Path) -> Option<PathBuf> {
    route_write(path).unwrap().session.map(|s| s.path)
}

/// What a path-prefix check would answer (the bug this call replaces).
fn prefix_says_session(fx: &Fx, path: &Path) -> bool {
    path.starts_with(&fx.session)
}

#[test]
fn a_plain_write_into_the_session_and_outside_it() {
    let fx = fx();
    let inside = fx.session.join("helper.py");
    let route = route_write(&inside).unwrap();
    assert_eq!(route.resolved, inside);
    let s = route.session.unwrap();
    let meta = std::fs::metadata(&fx.session).unwrap();
    assert_eq!((s.path, s.dev, s.ino), (fx.session.clone(), meta.dev(), meta.ino()));
    assert!(!route.reserved);
    let outside = fx.ws.join("src/main.rs");
    let route = route_write(&outside).unwrap();
    assert_eq!((route.resolved, route.session, route.reserved), (outside, None, false));
    // Directories that do not exist yet, below the session.
    let deep = fx.session.join("new/dir/f.txt");
    assert_eq!(route_write(&deep).unwrap().resolved, deep);
    assert_eq!(session_of(&deep), Some(fx.session.clone()));
}

#[test]
fn a_symlink_into_the_session_is_routed_to_it() {
    let fx = fx();
    symlink(&fx.session, fx.ws.join("src/link")).unwrap();
    let path = fx.ws.join("src/link/helper.py");
    assert!(!prefix_says_session(&fx, &path));
    assert_eq!(session_of(&path), Some(fx.session.clone()));
    assert_eq!(route_write(&path).unwrap().resolved, fx.session.join("helper.py"));
    // A relative link, and a link to a file that does not exist yet.
    symlink("../.winx/tmp", fx.ws.join("src/rel")).unwrap();
    let name = fx.session.file_name().unwrap();
    assert_eq!(session_of(&fx.ws.join("src/rel").join(name).join("x")), Some(fx.session.clone()));
    symlink(fx.session.join("later.py"), fx.ws.join("dangling")).unwrap();
    let route = route_write(&fx.ws.join("dangling")).unwrap();
    assert_eq!(
        (route.resolved, route.session.map(|s| s.path)),
        (fx.session.join("later.py"), Some(fx.session.clone()))
    );
}

#[test]
fn a_dotdot_out_of_the_session_is_not_routed_to_it() {
    let fx = fx();
    let path = fx.session.join("../../../src/main.rs");
    assert!(prefix_says_session(&fx, &path), "a prefix check would take the session's barrier");
    let route = route_write(&path).unwrap();
    assert_eq!(route.session, None);
    assert_eq!(route.resolved, fx.ws.join("src/main.rs"));
    // And `..` into it.
    let into = fx.ws.join("src/../.winx/tmp").join(fx.session.file_name().unwrap()).join("h.py");
    assert_eq!(session_of(&into), Some(fx.session.clone()));
    // `..` after a link is the link target's parent (physical).
    std::fs::create_dir(fx.session.join("sub")).unwrap();
    symlink(fx.session.join("sub"), fx.ws.join("s")).unwrap();
    assert_eq!(route_write(&fx.ws.join("s/../x")).unwrap().resolved, fx.session.join("x"));
}

#[test]
fn the_reserved_namespace_by_name_and_through_a_link() {
    let fx = fx();
    let q = fx.session.join(".winx-release-00ff");
    std::fs::create_dir(&q).unwrap();
    std::fs::write(q.join("t000"), b"captured").unwrap();
    assert!(route_write(&q.join("x")).unwrap().reserved);
    symlink(q.join("t000"), fx.ws.join("alias")).unwrap();
    let route = route_write(&fx.ws.join("alias")).unwrap();
    assert!(route.reserved);
    assert_eq!(route.session.map(|s| s.path), Some(fx.session.clone()));
    assert!(!route_write(&fx.session.join("ok.py")).unwrap().reserved);
}

#[test]
fn what_cannot_be_resolved_is_an_error() {
    let fx = fx();
    symlink(fx.ws.join("b"), fx.ws.join("a")).unwrap();
    symlink(fx.ws.join("a"), fx.ws.join("b")).unwrap();
    assert_eq!(route_write(&fx.ws.join("a/x")).unwrap_err().raw_os_error(), Some(libc_eloop()));
    std::fs::write(fx.ws.join("file"), b"x").unwrap();
    assert!(route_write(&fx.ws.join("file/x")).is_err());
    assert_eq!(route_write(Path::new("rel/x")).unwrap_err().kind(), io::ErrorKind::InvalidInput);
}

fn libc_eloop() -> i32 {
    Errno::LOOP.raw_os_error()
}
