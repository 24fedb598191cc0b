//! The socket server: bind, peer checks, JSON-lines dispatch, shutdown.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use winx_release_engine::layout::Layout;
use winx_release_engine::Reason;
use winx_release_protocol::messages::{
    error_line, ok_line, parse_request, ErrorCode, Hello, Request, RequestLine, SessionOpened, MAX_REQUEST_BYTES,
};
use winx_release_protocol::trust;
use winx_release_runtime::{ExecState, LivenessChoice, Runtime, RuntimeOptions};

use crate::activation;
use crate::error::context;
use crate::exec;
use crate::hello::{CAPABILITIES, PROTOCOL};
use crate::in_flight::{caught, Counted};
use crate::pool::Pool;
use crate::sessions::{layout_of, Guardian, OpError, RecordedPolicy};
use crate::sync::lock;

struct Shared {
    guardian: Arc<Guardian>,
    shutdown: Arc<AtomicBool>,
    in_flight: AtomicUsize,
    /// The next connection's number.
    next_conn: std::sync::atomic::AtomicU64,
    /// The threads connections are served on.
    pool: Pool,
    /// Open connections, in all and per peer process.
    conns: Conns,
}

/// Most connections open at once, from all peers (each is served on a
/// thread of its own and holds a descriptor or three).
pub const MAX_CONNECTIONS: usize = 256;

/// Most connections open at once from one peer process (a frontend opens
/// one per tool call in progress).
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;

/// The connections open: in all, and by the peer's pid.
#[derive(Clone, Debug, Default)]
struct Conns(Arc<std::sync::Mutex<(usize, std::collections::HashMap<i32, usize>)>>);

/// One open connection's place among [`Conns`], given back on drop.
#[derive(Debug)]
struct Slot {
    conns: Conns,
    pid: Option<i32>,
}

impl Conns {
    /// A place for one more connection from `pid` within `all` connections
    /// in all and `per_peer` of one process, or why there is none.
    fn take(&self, pid: Option<i32>, all: usize, per_peer: usize) -> Result<Slot, String> {
        let mut c = lock(&self.0);
        if c.0 >= all {
            return Err(format!("the guardian serves at most {all} connections at once; try again"));
        }
        if let Some(pid) = pid {
            let n = c.1.entry(pid).or_default();
            if *n >= per_peer {
                return Err(format!(
                    "the guardian serves at most {per_peer} connections of one process at once; close one and try again"
                ));
            }
            *n += 1;
        }
        c.0 += 1;
        Ok(Slot { conns: self.clone(), pid })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = lock(&self.conns.0);
        c.0 = c.0.saturating_sub(1);
        if let Some(pid) = self.pid {
            if let Some(n) = c.1.get_mut(&pid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.1.remove(&pid);
                }
            }
        }
    }
}

/// How a guardian runs.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// What its retention worker keeps.
    pub retention: winx_release_engine::retention::RetentionPolicy,
    /// How it tells what still runs (a cgroup per execution where it can).
    pub liveness: LivenessChoice,
}

/// [`serve_with`] the default options.
pub fn serve(socket: &Path, data_dir: &Path) -> std::io::Result<()> {
    serve_with(socket, data_dir, &ServeOptions::default())
}

/// Binds `socket` (or takes the listening socket systemd passed, see
/// `activation`), prints the ready line, notifies systemd, and
/// serves until SIGTERM/SIGINT.
pub fn serve_with(socket: &Path, data_dir: &Path, opts: &ServeOptions) -> std::io::Result<()> {
    // Before any thread: later growth of the table would wait for RCU.
    match winx_release_runtime::reserve_descriptor_table() {
        Ok(n) => tracing::debug!(descriptors = n, "descriptor table reserved"),
        Err(e) => tracing::debug!(error = %e, "descriptor table not reserved"),
    }
    let inherited = activation::inherited_listener()?;
    let activated = inherited.is_some();
    let (listener, socket) = match inherited {
        // systemd's socket: its unit made the directory (DirectoryMode=0700)
        // and owns the socket file, which stays when the guardian stops.
        Some(l) => {
            let path = activation::bound_path(&l, socket);
            (l, path)
        }
        None => (bind(socket)?, socket.to_path_buf()),
    };
    let socket = socket.as_path();
    listener.set_nonblocking(true)?;

    let shutdown = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, shutdown.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, shutdown.clone())?;
    crate::recover::recover_at_start(data_dir);
    // Retired journals are zeroed and reused, not unlinked: a new file
    // per release costs an inode allocation (`journal/idle.rs`). At most
    // one per release in flight is ever needed; 64 covers the sessions a
    // guardian serves at once, and a release beyond them creates a file.
    winx_release_engine::journal::keep_idle_journals(64);
    // The execution runtime: its liveness mode, and the executions an
    // earlier guardian left running (releases of their threads are refused
    // until nothing of them runs).
    let runtime = Runtime::start(
        data_dir,
        &RuntimeOptions {
            liveness: opts.liveness,
            move_self: true,
            subreaper: true,
            adopt: true,
            env_remove: activation::SYSTEMD_VARS.iter().map(Into::into).collect(),
            monitor: None,
        },
    );
    if runtime.liveness_mode() == winx_release_runtime::LivenessMode::Proc {
        tracing::warn!(reason = %runtime.liveness_reason(), "liveness: proc");
    } else {
        tracing::info!(reason = %runtime.liveness_reason(), "liveness: cgroup");
    }
    signal_hook::flag::register(signal_hook::consts::SIGCHLD, runtime.sigchld_flag())?;
    let guardian = Arc::new(Guardian::new(data_dir, runtime.clone()).with_shutdown(shutdown.clone()));
    {
        let (on_exit, on_resolved) = (Arc::downgrade(&guardian), Arc::downgrade(&guardian));
        runtime.set_hooks(
            Some(Arc::new(move |e| {
                if let Some(g) = on_exit.upgrade() {
                    exec::leader_exited(&g, e);
                }
            })),
            Some(Arc::new(move |e| {
                // Retention catches up (debounced), also for a background command.
                if let Some(g) = on_resolved.upgrade() {
                    g.retention.kick(e.workspace.to_str());
                }
            })),
        );
    }
    // The shells an earlier guardian left (killed, restarted, upgraded):
    // the same shells, taken over from their monitors.
    let taken = crate::reattach_at_start::reattach_at_start(&guardian);
    if taken > 0 {
        tracing::info!(shells = taken, "took over the shells an earlier guardian left");
    }
    let shared = Arc::new(Shared {
        guardian,
        shutdown,
        in_flight: AtomicUsize::new(0),
        next_conn: std::sync::atomic::AtomicU64::new(1),
        pool: Pool::default(),
        conns: Conns::default(),
    });
    // Retention's staging directory exists before the guardian serves, so
    // that the first background pass never changes the data directory's
    // shape under a client that has already started.
    if let Err(e) = winx_release_kernel::sys::create_private_dir_all(data_dir)
        .and_then(|()| winx_release_engine::retention::Staging::open(data_dir).map(drop))
    {
        tracing::warn!(error = %e, "retention staging directory unavailable; passes will retry");
    }
    let worker = {
        let (shared, policy) = (shared.clone(), opts.retention);
        std::thread::spawn(move || crate::retention::run(&shared.guardian, policy, &shared.shutdown))
    };

    let liveness = runtime.liveness_mode().as_str();
    tracing::info!(containment = runtime.containment(), reason = %runtime.containment_reason(), "containment");
    // Keys in the contract's order (a `json!` object sorts them).
    let ready = format!(
        r#"{{"event":"ready","socket":{},"pid":{},"capabilities":{},"liveness":{},"containment":{}}}"#,
        json!(socket),
        std::process::id(),
        json!(CAPABILITIES),
        json!(liveness),
        json!(runtime.containment())
    );
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{ready}")?;
        out.flush()?;
    }
    activation::notify_ready();
    tracing::info!(socket = %socket.display(), activated, instance = %shared.guardian.instance, "guardian ready");

    accept_loop(&shared, &listener);
    activation::notify_stopping();
    drop(listener);
    if !activated {
        let _ = std::fs::remove_file(socket);
    }
    while shared.in_flight.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = worker.join();
    runtime.leave();
    // Every release has ended (none in flight): the kept journals are empty.
    let dropped = winx_release_engine::journal::drop_idle_journals();
    tracing::debug!(dropped, "kept journals removed");
    let (scans, cache) = (shared.guardian.scanner.stats(), shared.guardian.scanner.cache().stats());
    tracing::info!(
        connection_threads = shared.pool.started(),
        scan_requests = scans.requests,
        scan_flights = scans.flights,
        cached_dirs = cache.hits,
        dirs_read = cache.reads,
        "guardian stopped"
    );
    Ok(())
}

/// Binds the guardian socket at `socket` (mode 0600) in a trusted
/// directory, replacing only a stale socket.
fn bind(socket: &Path) -> std::io::Result<UnixListener> {
    // A directory it did not create is never chmodded: an untrusted one
    // (another owner, not 0700, a link) is refused.
    let dir = trust::socket_dir(socket);
    trust::trusted_socket_dir(dir, true).map_err(|e| {
        let e = context(e, format!("socket directory {}", dir.display()));
        match winx_release_protocol::socket_path::socket_advice(socket) {
            Some(a) => std::io::Error::new(e.kind(), format!("{e}; {a}")),
            None => e,
        }
    })?;
    if let Ok(meta) = std::fs::symlink_metadata(socket) {
        if !meta.file_type().is_socket() {
            let msg = format!("{} exists and is not a socket; not removing it", socket.display());
            return Err(std::io::Error::new(ErrorKind::AlreadyExists, msg));
        }
        if UnixStream::connect(socket).is_ok() {
            let msg = format!("a guardian already listens on {}", socket.display());
            return Err(std::io::Error::new(ErrorKind::AddrInUse, msg));
        }
        std::fs::remove_file(socket).map_err(|e| context(e, format!("stale socket {}", socket.display())))?;
    }
    let listener = UnixListener::bind(socket).map_err(|e| context(e, format!("bind {}", socket.display())))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// How long the accept loop waits for a peer before it looks at the
/// shutdown flag again.
const ACCEPT_POLL: Duration = Duration::from_millis(25);

/// Accepts peers of this user until shutdown.
///
/// The listener is non-blocking; between peers the loop waits in `poll(2)`,
/// which returns as soon as a peer connects (a fixed sleep here once added
/// up to 25 ms to every frontend call), and at least every
/// [`ACCEPT_POLL`] to see a shutdown.
///
/// # References
/// - [`poll(2)`](https://man7.org/linux/man-pages/man2/poll.2.html)
fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = trust::check_peer(&stream) {
                    tracing::warn!(error = %e, "refused a peer");
                    continue;
                }
                let peer = Peer::of(&stream, shared.next_conn.fetch_add(1, Ordering::Relaxed));
                let slot = match shared.conns.take(peer.pid, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER) {
                    Ok(slot) => slot,
                    Err(msg) => {
                        // Over a bound: one error line, and the connection
                        // is closed before any thread serves it.
                        tracing::warn!(pid = ?peer.pid, "{msg}");
                        let mut s = stream;
                        let _ = s.set_nonblocking(true);
                        let _ = s.write_all(&error_line(0, ErrorCode::IoError, &msg));
                        continue;
                    }
                };
                let served = shared.clone();
                let refuse = stream.try_clone();
                if let Err(e) = shared.pool.run(move || {
                    let _slot = slot;
                    connection(served, stream, peer);
                }) {
                    // No thread for it (the task limit): one error line and
                    // the connection is closed; the accept loop goes on.
                    tracing::warn!(error = %e, "no thread to serve a connection");
                    if let Ok(mut s) = refuse {
                        let msg =
                            format!("the guardian cannot start a thread to serve this connection ({e}); try again");
                        let _ = s.write_all(&error_line(0, ErrorCode::IoError, &msg));
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                let mut fds = [rustix::event::PollFd::new(listener, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec { tv_sec: 0, tv_nsec: ACCEPT_POLL.as_nanos() as _ };
                if rustix::event::poll(&mut fds, Some(&timeout)).is_err() {
                    std::thread::sleep(ACCEPT_POLL);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(25));
            }
        }
    }
}

/// The process at the other end of one connection.
struct Peer {
    /// The connection's number.
    conn: u64,
    /// Its pid (`SO_PEERCRED`).
    pid: Option<i32>,
    /// A pidfd of it, until it is handed to the guardian at `hello`.
    pidfd: Option<std::os::fd::OwnedFd>,
    /// The guardian, once the peer said `hello` (forgotten on close).
    said_hello: Option<Arc<Guardian>>,
}

impl Peer {
    /// The peer of `stream`: its pid, and a pidfd of that very process from
    /// the socket itself (`SO_PEERPIDFD`, Linux 6.5), else one opened by pid
    /// now (a pid reused since the connect would then be taken for it).
    fn of(stream: &UnixStream, conn: u64) -> Peer {
        use std::os::fd::AsFd;
        let pid = rustix::net::sockopt::socket_peercred(stream).ok().map(|c| c.pid.as_raw_nonzero().get());
        let pidfd = winx_release_kernel::sys::peer_pidfd(stream.as_fd())
            .or_else(|| pid.and_then(winx_release_kernel::sys::pidfd_of));
        Peer { conn, pid, pidfd, said_hello: None }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(g) = &self.said_hello {
            g.peer_gone(self.conn);
        }
    }
}

fn connection(shared: Arc<Shared>, stream: UnixStream, mut peer: Peer) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        if shared.shutdown.load(Ordering::SeqCst) && line.is_empty() {
            return;
        }
        let before = line.len();
        let res = (&mut reader).take(MAX_REQUEST_BYTES + 1 - before as u64).read_until(b'\n', &mut line);
        match res {
            Ok(0) if line.len() == before => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        if line.last() != Some(&b'\n') {
            if line.len() as u64 > MAX_REQUEST_BYTES {
                let _ = write_line(&mut writer, &error_line(0, ErrorCode::InvalidInput, "request line too long"));
                return;
            }
            continue; // partial line; keep reading
        }
        // Raise in_flight before looking at shutdown (both SeqCst): either
        // the stopping guardian sees this request in flight and waits for
        // it, reply included, or this thread sees the shutdown and runs
        // nothing. A request never runs while the guardian exits.
        let counted = Counted::raise(&shared.in_flight);
        if shared.shutdown.load(Ordering::SeqCst) {
            let id = match parse_request(&line) {
                Ok(r) => r.id,
                Err(e) => e.id,
            };
            let msg = "the guardian is stopping; nothing was run";
            let _ = write_line(&mut writer, &error_line(id, ErrorCode::Reason(Reason::OwnerUnavailable), msg));
            return;
        }
        let Some((reply, close)) = caught(|| handle_line(&shared.guardian, &line, &mut peer)) else { return };
        line.clear();
        let written = write_line(&mut writer, &reply);
        drop(counted);
        if written.is_err() || close {
            return;
        }
    }
}

fn write_line(w: &mut UnixStream, line: &[u8]) -> std::io::Result<()> {
    w.write_all(line)
}

/// Handles one request line and returns the reply line (with its newline).
///
/// The second value is true when the line could not be read as a request
/// at all; the connection is then closed.
fn handle_line(g: &Arc<Guardian>, line: &[u8], peer: &mut Peer) -> (Vec<u8>, bool) {
    match parse_request(line) {
        Ok(RequestLine { id, request }) => (handle(g, id, request, peer), false),
        Err(e) => {
            let close = e.code == ErrorCode::InvalidInput && e.id == 0;
            (error_line(e.id, e.code, &e.message), close)
        }
    }
}

/// Runs one parsed request.
fn handle(g: &Arc<Guardian>, id: u64, request: Request, peer: &mut Peer) -> Vec<u8> {
    let reply = match request {
        Request::Hello { .. } => {
            // A peer that said hello: its open descriptors never make a
            // target in use while this connection is open and it runs the
            // guardian's own executable (the client string proves nothing).
            if let (Some(pid), None) = (peer.pid, &peer.said_hello) {
                g.peer_said_hello(peer.conn, pid, peer.pidfd.take());
                peer.said_hello = Some(g.clone());
            }
            Ok(ok_line(
                id,
                &Hello {
                    protocol: PROTOCOL,
                    guardian: concat!("winx-release-guardian/", env!("CARGO_PKG_VERSION")).to_owned(),
                    platform: std::env::consts::OS.to_owned(),
                    capabilities: CAPABILITIES.iter().map(|c| (*c).to_owned()).collect(),
                    instance: Some(g.instance.clone()),
                    pid: Some(u64::from(std::process::id())),
                    liveness: Some(g.runtime.liveness_mode().as_str().to_owned()),
                    data_dir: std::fs::canonicalize(&g.data_dir).ok().map(|d| d.display().to_string()),
                    containment: Some(g.runtime.containment().to_owned()),
                },
            ))
        }
        Request::SessionOpen { workspace, thread_id, mode_name, code_writer_config } => {
            let policy = mode_name.map(|mode_name| RecordedPolicy { mode_name, code_writer_config });
            session_open(g, id, &workspace, &thread_id, policy)
        }
        Request::Exec { workspace, thread_id, command, wait_for_seconds, is_background } => {
            let r = exec_op(g, id, &workspace, &thread_id, &command, wait_for_seconds, is_background);
            // A command completed (or was left running): retention catches
            // up, debounced.
            g.retention.kick(Some(&workspace));
            r
        }
        Request::ExecStatus { command_id, wait_for_seconds, .. } => {
            let r = exec_status(g, id, &command_id, wait_for_seconds);
            g.retention.kick(None);
            r
        }
        Request::Release { workspace, thread_id, targets, dry_run } => {
            let r = crate::release::release_op(g, id, &workspace, &thread_id, &targets, dry_run);
            g.retention.kick(Some(&workspace));
            r
        }
        Request::Status { workspace, thread_id } => crate::status::status_op(g, id, &workspace, &thread_id),
        Request::GuardianStatus {} => Ok(ok_line(id, &crate::stop::guardian_status(g))),
        Request::Stop { force } => crate::stop::stop(g, force)
            .map(|r| ok_line(id, &r))
            .map_err(|m| (ErrorCode::Reason(Reason::ExecutionActive), m)),
        Request::Shell { workspace, thread_id, action, wait_for_seconds } => {
            let r = layout_of(g, &workspace, &thread_id).and_then(|layout| {
                let session = register(g, layout, &thread_id)?;
                crate::shell_op::shell_op(g, id, &session, action, wait_secs(wait_for_seconds, 5.0))
            });
            g.retention.kick(Some(&workspace));
            r
        }
    };
    reply.unwrap_or_else(|(code, message)| error_line(id, code, &message))
}

fn session_open(
    g: &Arc<Guardian>,
    id: u64,
    workspace: &str,
    thread: &str,
    policy: Option<RecordedPolicy>,
) -> Result<Vec<u8>, OpError> {
    let layout = layout_of(g, workspace, thread)?;
    let s = register(g, layout, thread)?;
    // The latest Initialize's mode is the thread's (a frontend that does
    // not send one leaves what was recorded).
    if let Some(p) = policy {
        *lock(&s.policy) = Some(p);
    }
    Ok(ok_line(
        id,
        &SessionOpened { session_dir: s.session_dir.display().to_string(), instance: Some(g.instance.clone()) },
    ))
}

/// Creates the session directory through the engine's one no-follow path
/// and registers its session.
fn register(g: &Arc<Guardian>, layout: Layout, thread: &str) -> Result<Arc<crate::sessions::OwnedSession>, OpError> {
    let s =
        g.register(layout, thread).map_err(|e| (ErrorCode::SessionUnavailable, format!("session directory: {e}")))?;
    crate::prewarm::once(g, &s.layout);
    Ok(s)
}

fn wait_secs(wait: Option<f64>, default: f64) -> Duration {
    Duration::from_secs_f64(wait.unwrap_or(default).clamp(0.0, 3600.0))
}

fn exec_op(
    g: &Arc<Guardian>,
    id: u64,
    workspace: &str,
    thread: &str,
    command: &str,
    wait: Option<f64>,
    background: bool,
) -> Result<Vec<u8>, OpError> {
    let layout = layout_of(g, workspace, thread)?;
    let session = register(g, layout, thread)?;
    let submitted = {
        let _admission = session.admission.enter();
        exec::submit(g, &session, command, background)
    };
    let e = submitted.map_err(|err| (ErrorCode::IoError, err.to_string()))?;
    if !background {
        // A foreground call waits for the shell; what it left behind keeps
        // the execution running (and releases refused) after the reply.
        e.wait_until(wait_secs(wait, 5.0), |s| !matches!(s, ExecState::Queued | ExecState::Running));
    }
    Ok(ok_line(id, &exec::reply(&e)))
}

fn exec_status(g: &Arc<Guardian>, id: u64, command_id: &str, wait: Option<f64>) -> Result<Vec<u8>, OpError> {
    let e = g.runtime.lookup(command_id).ok_or_else(|| {
        let msg = format!(
            "unknown command_id {command_id}: not started by this guardian, or its record was removed by retention"
        );
        (ErrorCode::NotFound, msg)
    })?;
    e.wait_until(wait_secs(wait, 0.0), ExecState::is_final);
    Ok(ok_line(id, &exec::reply(&e)))
}

#[cfg(test)]
mod conn_tests {
    use super::*;

    #[test]
    fn connections_are_bounded_per_process_and_in_all_and_given_back() {
        let conns = Conns::default();
        let a: Vec<Slot> = (0..2).map(|_| conns.take(Some(1), 3, 2).unwrap()).collect();
        assert!(conns.take(Some(1), 3, 2).unwrap_err().contains("at most 2 connections of one process"));
        let b = conns.take(Some(2), 3, 2).unwrap();
        assert!(conns.take(Some(3), 3, 2).unwrap_err().contains("at most 3 connections at once"));
        assert!(conns.take(None, 3, 2).is_err());
        drop(b);
        let c = conns.take(None, 3, 2).unwrap();
        drop(a);
        drop(c);
        assert_eq!(lock(&conns.0).0, 0);
        assert!(lock(&conns.0).1.is_empty());
        assert!(conns.take(Some(1), 3, 2).is_ok());
    }
}
