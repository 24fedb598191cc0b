//! Whether io_uring can be used here, and why not.
//!
//! The probe reads `/proc/sys/kernel/io_uring_disabled`, sets up a small
//! ring (`io_uring_setup` fails with `EPERM` under a seccomp filter or when
//! disabled, `ENOSYS` on kernels without io_uring), asks the kernel which
//! opcodes it supports (`IORING_REGISTER_PROBE`), and runs one `statx`
//! through the ring to catch kernels that list an opcode but refuse it with
//! `EINVAL` (gVisor). [`gather`] collects those facts; [`probe_with`] turns
//! facts into a verdict, so tests can feed it any combination.
//!
//! The verdict for this process is computed once ([`probe`]); a later
//! refusal seen on a completion (`EINVAL`, see `ring`) turns it to unavailable
//! for the rest of the process.
//!
//! # References
//! - [`io_uring_setup(2)`](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)
//! - [`io_uring_register(2)`](https://man7.org/linux/man-pages/man2/io_uring_register.2.html)
//!   (`IORING_REGISTER_PROBE`)
//! - [`proc_sys_kernel(5)`](https://man7.org/linux/man-pages/man5/proc_sys_kernel.5.html)
//!   (`io_uring_disabled`)

use std::fmt;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, OnceLock};

use io_uring::{opcode, types, IoUring, Probe};

/// Opcodes the scan and the rehash pipeline need, with their names.
pub const REQUIRED_OPS: [(u8, &str); 3] = [
    (opcode::Statx::CODE, "IORING_OP_STATX"),
    (opcode::OpenAt::CODE, "IORING_OP_OPENAT"),
    (opcode::Read::CODE, "IORING_OP_READ"),
];

/// `IORING_OP_CLOSE`: used for asynchronous close when present; without it
/// descriptors are closed with `close(2)`.
pub const CLOSE_OP: u8 = opcode::Close::CODE;

/// The facts a probe decides from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeInputs {
    /// The content of `/proc/sys/kernel/io_uring_disabled`; `None` when the
    /// file does not exist (kernels before 6.6 have no such switch).
    pub io_uring_disabled: Option<String>,
    /// The errno of `io_uring_setup`; `None` when it succeeded.
    pub setup_errno: Option<i32>,
    /// The opcodes `IORING_REGISTER_PROBE` reports; `None` when the probe
    /// itself failed (kernels before 5.6).
    pub supported_ops: Option<Vec<u8>>,
    /// The result of one `statx` of `/` through the ring: `None` when it
    /// succeeded, else its errno.
    pub smoke_errno: Option<i32>,
}

/// Why io_uring cannot be used.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// `io_uring_disabled` is 2 (disabled for everyone).
    Disabled,
    /// `io_uring_setup` failed with this errno (`EPERM`: seccomp, or
    /// `io_uring_disabled` = 1 without the right group; `ENOSYS`: no
    /// io_uring in this kernel or a seccomp filter that hides it).
    Setup(i32),
    /// The kernel's probe failed (kernel before 5.6).
    NoProbe,
    /// The kernel does not support this opcode.
    MissingOp(&'static str),
    /// A live operation was refused with this errno (gVisor answers
    /// `EINVAL`).
    Refused(String),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Disabled => write!(f, "io_uring is disabled (/proc/sys/kernel/io_uring_disabled = 2)"),
            Unavailable::Setup(e) => {
                let what = match *e {
                    libc::EPERM => " (seccomp filter or io_uring_disabled)",
                    libc::ENOSYS => " (kernel without io_uring, or hidden by seccomp)",
                    _ => "",
                };
                write!(f, "io_uring_setup failed: {}{what}", std::io::Error::from_raw_os_error(*e))
            }
            Unavailable::NoProbe => write!(f, "IORING_REGISTER_PROBE failed (kernel older than 5.6)"),
            Unavailable::MissingOp(op) => write!(f, "the kernel does not support {op}"),
            Unavailable::Refused(why) => write!(f, "io_uring refused an operation: {why}"),
        }
    }
}

impl std::error::Error for Unavailable {}

/// What a successful probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// `IORING_OP_CLOSE` is supported.
    pub async_close: bool,
}

/// Decides from `inputs` whether io_uring can be used.
///
/// In order: `io_uring_disabled` = 2; a failed setup; a failed opcode
/// probe; a required opcode missing; a refused live `statx`. A value of 1 in
/// `io_uring_disabled` is not decisive by itself: it allows members of
/// `kernel.io_uring_group` and `CAP_SYS_ADMIN`, so the setup result decides.
pub fn probe_with(inputs: &ProbeInputs) -> Result<Capabilities, Unavailable> {
    if inputs.io_uring_disabled.as_deref().map(str::trim) == Some("2") {
        return Err(Unavailable::Disabled);
    }
    if let Some(e) = inputs.setup_errno {
        return Err(Unavailable::Setup(e));
    }
    let ops = inputs.supported_ops.as_ref().ok_or(Unavailable::NoProbe)?;
    if let Some((_, name)) = REQUIRED_OPS.iter().find(|(code, _)| !ops.contains(code)) {
        return Err(Unavailable::MissingOp(name));
    }
    if let Some(e) = inputs.smoke_errno {
        return Err(Unavailable::Refused(format!(
            "IORING_OP_STATX completed with {}",
            std::io::Error::from_raw_os_error(e)
        )));
    }
    Ok(Capabilities { async_close: ops.contains(&CLOSE_OP) })
}

/// Collects the probe's facts from this kernel, on the calling thread (a
/// seccomp filter applies per thread).
pub fn gather() -> ProbeInputs {
    let io_uring_disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    let mut inputs = ProbeInputs { io_uring_disabled, ..ProbeInputs::default() };
    let mut ring: IoUring = match IoUring::new(4) {
        Ok(r) => r,
        Err(e) => {
            inputs.setup_errno = Some(e.raw_os_error().unwrap_or(libc::ENOSYS));
            return inputs;
        }
    };
    let mut probe = Probe::new();
    if ring.submitter().register_probe(&mut probe).is_ok() {
        inputs.supported_ops = Some((0..=u8::MAX).filter(|&op| probe.is_supported(op)).collect());
    }
    inputs.smoke_errno = smoke_statx(&mut ring).err();
    inputs
}

/// One `statx("/")` through `ring`, compared with the system call.
///
/// The `statx` buffer lives on the heap: if the wait fails, the kernel may
/// still write that very buffer, so it is leaked (with the descriptor of
/// `/`), never freed.
fn smoke_statx(ring: &mut IoUring) -> Result<(), i32> {
    let root = std::fs::File::open("/").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    // SAFETY: `libc::statx` is plain old data; all-zero is a valid value.
    let mut st: Box<libc::statx> = Box::new(unsafe { std::mem::zeroed() });
    let entry = opcode::Statx::new(types::Fd(root.as_raw_fd()), c".".as_ptr(), std::ptr::addr_of_mut!(*st).cast())
        .flags(libc::AT_SYMLINK_NOFOLLOW)
        .mask(libc::STATX_TYPE | libc::STATX_INO)
        .build()
        .user_data(1);
    // SAFETY: the path is static; the boxed `st` and `root` stay allocated
    // and open until the completion is reaped below, or, when the wait
    // fails and the completion may still come, for good (both are leaked).
    unsafe { ring.submission().push(&entry) }.map_err(|_| libc::EBUSY)?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                // The completion may still come: the kernel holds `st`'s
                // heap address and `root`'s descriptor; keep both for good.
                std::mem::forget(root);
                Box::leak(st);
                return Err(e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }
    let cqe = ring.completion().next().ok_or(libc::EIO)?;
    if cqe.result() < 0 {
        return Err(-cqe.result());
    }
    let sync = rustix::fs::statx(&root, ".", rustix::fs::AtFlags::SYMLINK_NOFOLLOW, rustix::fs::StatxFlags::INO)
        .map_err(|e| e.raw_os_error())?;
    if sync.stx_ino != st.stx_ino {
        return Err(libc::EINVAL);
    }
    Ok(())
}

static VERDICT: OnceLock<Result<Capabilities, Unavailable>> = OnceLock::new();
static REFUSED: Mutex<Option<String>> = Mutex::new(None);

/// Whether io_uring can be used in this process: the probe, computed once,
/// unless the kernel refused an operation on a completion since.
pub fn probe() -> Result<Capabilities, Unavailable> {
    if let Some(why) = REFUSED.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        return Err(Unavailable::Refused(why));
    }
    VERDICT
        .get_or_init(|| {
            let inputs = gather();
            let verdict = probe_with(&inputs);
            match &verdict {
                Ok(caps) => tracing::debug!(?caps, "io_uring available"),
                Err(why) => tracing::info!(reason = %why, "io_uring unavailable"),
            }
            verdict
        })
        .clone()
}

/// Records that the kernel refused an operation on a completion: io_uring
/// is unavailable for the rest of the process.
pub(crate) fn mark_refused(why: String) {
    let mut r = REFUSED.lock().unwrap_or_else(|p| p.into_inner());
    if r.is_none() {
        *r = Some(why);
    }
}

/// Installs, on the calling thread only, a seccomp filter that fails
/// `io_uring_setup` with `errno`, as a container runtime's default
/// profile does: the way to test that a caller falls back to system calls.
/// It cannot be removed; run it on a thread of its own.
///
/// # References
/// - [`seccomp(2)`](https://man7.org/linux/man-pages/man2/seccomp.2.html)
pub fn deny_io_uring_setup(errno: i32) -> std::io::Result<()> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code: u16, k: u32| libc::sock_filter { code, jt: 0, jf: 0, k };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    // struct seccomp_data { int nr; __u32 arch; ... }
    let filter = [
        stmt(LD_W_ABS, 4),
        jump(JEQ_K, ARCH, 1, 0),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(LD_W_ABS, 0),
        jump(JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | (errno as u32 & libc::SECCOMP_RET_DATA)),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: plain prctl calls; `prog` and `filter` outlive them; the
    // filter applies to this thread only (no TSYNC).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn all_ops() -> Option<Vec<u8>> {
        Some((0..=60).collect())
    }

    fn ok_inputs() -> ProbeInputs {
        ProbeInputs {
            io_uring_disabled: Some("0\n".into()),
            setup_errno: None,
            supported_ops: all_ops(),
            smoke_errno: None,
        }
    }

    #[test]
    fn available_when_everything_works() {
        assert_eq!(probe_with(&ok_inputs()), Ok(Capabilities { async_close: true }));
        let old = ProbeInputs { io_uring_disabled: None, ..ok_inputs() };
        assert!(probe_with(&old).is_ok());
        // 1 lets the setup decide.
        let group = ProbeInputs { io_uring_disabled: Some("1\n".into()), ..ok_inputs() };
        assert!(probe_with(&group).is_ok());
    }

    #[test]
    fn disabled_sysctl() {
        let i = ProbeInputs { io_uring_disabled: Some("2\n".into()), ..ok_inputs() };
        assert_eq!(probe_with(&i), Err(Unavailable::Disabled));
        let i = ProbeInputs { io_uring_disabled: Some("1\n".into()), setup_errno: Some(libc::EPERM), ..ok_inputs() };
        assert_eq!(probe_with(&i), Err(Unavailable::Setup(libc::EPERM)));
    }

    #[test]
    fn setup_errors() {
        for e in [libc::EPERM, libc::ENOSYS, libc::ENOMEM] {
            let i = ProbeInputs { setup_errno: Some(e), ..ok_inputs() };
            assert_eq!(probe_with(&i), Err(Unavailable::Setup(e)));
        }
        let msg = Unavailable::Setup(libc::EPERM).to_string();
        assert!(msg.contains("seccomp"), "{msg}");
    }

    #[test]
    fn missing_probe_or_opcode() {
        let i = ProbeInputs { supported_ops: None, ..ok_inputs() };
        assert_eq!(probe_with(&i), Err(Unavailable::NoProbe));
        for (code, name) in REQUIRED_OPS {
            let ops: Vec<u8> = (0..=60).filter(|&o| o != code).collect();
            let i = ProbeInputs { supported_ops: Some(ops), ..ok_inputs() };
            assert_eq!(probe_with(&i), Err(Unavailable::MissingOp(name)));
        }
        let no_close: Vec<u8> = (0..=60).filter(|&o| o != CLOSE_OP).collect();
        let i = ProbeInputs { supported_ops: Some(no_close), ..ok_inputs() };
        assert_eq!(probe_with(&i), Ok(Capabilities { async_close: false }));
    }

    #[test]
    fn refused_live_op() {
        let i = ProbeInputs { smoke_errno: Some(libc::EINVAL), ..ok_inputs() };
        match probe_with(&i) {
            Err(Unavailable::Refused(why)) => assert!(why.contains("IORING_OP_STATX"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn this_kernel() {
        let inputs = gather();
        // The development and CI kernels have io_uring; elsewhere the probe
        // must at least say why not.
        match probe_with(&inputs) {
            Ok(_) => assert!(inputs.supported_ops.is_some()),
            Err(why) => assert!(!why.to_string().is_empty()),
        }
    }

    /// A real seccomp filter on this test's thread makes `io_uring_setup`
    /// fail with `EPERM`, and the probe reports it.
    #[test]
    fn seccomp_filter_blocks_setup() {
        let handle = std::thread::spawn(|| {
            if deny_io_uring_setup(libc::EPERM).is_err() {
                eprintln!("skipping: cannot install a seccomp filter here");
                return None;
            }
            Some(gather())
        });
        let Some(inputs) = handle.join().unwrap() else { return };
        assert_eq!(inputs.setup_errno, Some(libc::EPERM));
        assert_eq!(probe_with(&inputs), Err(Unavailable::Setup(libc::EPERM)));
    }
}
