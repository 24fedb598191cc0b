//! A bounded pipeline of operations on one io_uring, with a synchronous mode.
//!
//! [`Pipeline`] owns a fixed set of slots; each queued operation occupies one
//! slot (and, for `statx`, writes into that slot's own buffer) until its
//! completion has been reaped and handed to the caller. The submission queue
//! is at least as large as the slot count and the completion queue twice
//! that, so neither can overflow.
//!
//! The same interface runs without a ring: in synchronous mode each
//! operation is carried out by the matching system call when it is pushed,
//! and its result is delivered by the next `Pipeline::reap`. A pipeline
//! switches to synchronous mode for good when a completion reports `EINVAL`
//! (what gVisor answers for operations it does not implement): that
//! operation is run again synchronously, its synchronous result is the one
//! delivered, and every later operation is synchronous. The switch is shared
//! by every pipeline of one scan or rehash ([`Shared`]), so the whole run
//! finishes on system calls and says so.
//!
//! # Ownership rules
//!
//! - a path given to `statx`/`openat` is copied by the kernel when the entry
//!   is submitted, but it must stay valid until then: the caller keeps it
//!   alive until the completion is delivered;
//! - a read buffer is written until the completion: the caller keeps it
//!   alive until the completion is delivered;
//! - a directory or file descriptor named by an operation stays open until
//!   the completion is delivered;
//! - [`Pipeline`]'s `Drop` waits for every submitted operation (it never
//!   submits queued ones); if that wait fails, the slots are leaked rather
//!   than freed under the kernel, and `Pipeline::poisoned` tells the owner
//!   of read buffers to leak them too.
//! - when `io_uring_enter` fails for good (`Pipeline::poisoned` becomes
//!   true), every operation then outstanding is delivered with `-EIO`
//!   although the kernel may still carry it out: its `statx` slot is
//!   leaked here, and whoever owns its read buffer, path or descriptor must
//!   leak that too, never free or reuse it. Once poisoned, an owner treats
//!   every failed delivery as such an abandoned operation.
//!
//! # References
//! - [`io_uring_setup(2)`](https://man7.org/linux/man-pages/man2/io_uring_setup.2.html)
//! - [`io_uring_enter(2)`](https://man7.org/linux/man-pages/man2/io_uring_enter.2.html)
//! - [`io_uring_register(2)`](https://man7.org/linux/man-pages/man2/io_uring_register.2.html)

use std::mem::{self, MaybeUninit};
use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use io_uring::{opcode, types, EnterFlags, IoUring};

use super::ops::run_sync;
pub(crate) use super::ops::Op;
pub use super::ops::Shared;

/// How a ring is set up. The defaults are what measured fastest on the
/// development machine (see `benches/README.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Submission-queue entries, which is also the number of operations in
    /// flight at once on one ring (rounded up to a power of two by the
    /// kernel; at least 2).
    pub entries: u32,
    /// Limit on the ring's bounded io-wq workers (`statx`, which the kernel
    /// always hands to a worker, and blocking `openat`/`read`); 0 keeps the
    /// kernel's default (4 per CPU).
    pub iowq_max_workers: u32,
    /// `IORING_SETUP_SINGLE_ISSUER`: only the creating thread submits.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN` (needs `single_issuer`): completion work
    /// runs when the owner waits, not by interrupting it.
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN`: no interrupt to run completion work.
    pub coop_taskrun: bool,
    /// Close descriptors with `IORING_OP_CLOSE` instead of `close(2)`.
    pub async_close: bool,
    /// When the pipeline is full, wait for `1/wait_divisor` of the
    /// operations in flight (at least one) before reaping. Larger values
    /// refill sooner; smaller ones sleep less often.
    pub wait_divisor: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            entries: 256,
            iowq_max_workers: 0,
            single_issuer: true,
            defer_taskrun: true,
            coop_taskrun: false,
            async_close: false,
            wait_divisor: 4,
        }
    }
}

/// Tag of completions that are never delivered (`close`).
const CLOSE_TAG: u64 = u64::MAX;

struct Slot {
    op: Op,
    tag: u64,
    res: i32,
    statx: libc::statx,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            op: Op::Close { fd: -1 },
            tag: 0,
            res: 0,
            // SAFETY: `libc::statx` is plain old data; all-zero is a valid value.
            statx: unsafe { MaybeUninit::zeroed().assume_init() },
        }
    }
}

/// A bounded set of operations in flight on one ring, or run synchronously.
pub struct Pipeline {
    ring: Option<IoUring>,
    /// Fixed for the pipeline's life: the kernel holds pointers to the
    /// `statx` buffers inside.
    slots: Box<[Slot]>,
    free: Vec<u32>,
    /// Entries pushed to the submission queue, not yet submitted.
    queued: usize,
    /// Entries submitted whose completion has not been seen.
    in_flight: usize,
    /// Slots completed synchronously, awaiting delivery.
    ready: Vec<u32>,
    shared: Arc<Shared>,
    config: RingConfig,
    poisoned: bool,
}

/// Builds a ring as `config` asks, dropping setup flags the kernel refuses.
pub(crate) fn build_ring(config: &RingConfig) -> std::io::Result<IoUring> {
    let entries = config.entries.max(2);
    let attempt = |single: bool, defer: bool, coop: bool, submit_all: bool| {
        let mut b = IoUring::builder();
        if single {
            b.setup_single_issuer();
        }
        if defer {
            b.setup_defer_taskrun();
        }
        if coop {
            b.setup_coop_taskrun();
        }
        if submit_all {
            b.setup_submit_all();
        }
        b.setup_cqsize(entries.saturating_mul(2));
        b.build(entries)
    };
    let single = config.single_issuer || config.defer_taskrun;
    let ring = match attempt(single, config.defer_taskrun, config.coop_taskrun, true) {
        Ok(r) => r,
        // An older kernel that lacks one of the flags: plain setup.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => attempt(false, false, false, false)?,
        Err(e) => return Err(e),
    };
    if config.iowq_max_workers > 0 {
        let mut max = [config.iowq_max_workers, config.iowq_max_workers];
        if let Err(e) = ring.submitter().register_iowq_max_workers(&mut max) {
            tracing::debug!(error = %e, "io-wq worker limit not set");
        }
    }
    Ok(ring)
}

impl Pipeline {
    /// A pipeline on a new ring, or synchronous when `shared` already
    /// switched or the ring cannot be set up (the run then switches).
    pub fn new(config: &RingConfig, shared: Arc<Shared>) -> Pipeline {
        let ring = if shared.degraded() {
            None
        } else {
            match build_ring(config) {
                Ok(r) => Some(r),
                Err(e) => {
                    shared.degrade(format!("io_uring_setup failed: {e}"), false);
                    None
                }
            }
        };
        Self::with_ring(ring, config, shared)
    }

    /// A synchronous pipeline.
    pub fn synchronous(config: &RingConfig, shared: Arc<Shared>) -> Pipeline {
        Self::with_ring(None, config, shared)
    }

    fn with_ring(ring: Option<IoUring>, config: &RingConfig, shared: Arc<Shared>) -> Pipeline {
        let n = config.entries.max(2) as usize;
        let slots: Box<[Slot]> = (0..n).map(|_| Slot::empty()).collect();
        Pipeline {
            ring,
            slots,
            free: (0..n as u32).rev().collect(),
            queued: 0,
            in_flight: 0,
            ready: Vec::with_capacity(n),
            shared,
            config: *config,
            poisoned: false,
        }
    }

    /// Whether operations go to a ring (rather than system calls).
    pub(crate) fn is_ring(&self) -> bool {
        self.ring.is_some() && !self.shared.degraded()
    }

    /// Whether a fatal ring error leaked operations whose buffers the kernel
    /// may still write: the owner of read buffers must then leak them.
    pub(crate) fn poisoned(&self) -> bool {
        self.poisoned
    }

    /// Operations that can be in flight at once.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Whether another operation can be pushed now.
    pub(crate) fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Operations pushed and not yet delivered.
    pub(crate) fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Queues `op`; its completion will be delivered with `tag`.
    ///
    /// # Panics
    /// When there is no room (see [`Pipeline::has_room`]).
    ///
    /// # Safety
    /// Every pointer and descriptor in `op` stays valid until the completion
    /// with `tag` has been delivered by [`Pipeline::reap`] (a `close` takes
    /// the descriptor over and is never delivered).
    pub(crate) unsafe fn push(&mut self, op: Op, tag: u64) {
        let idx = self.free.pop().expect("pipeline full");
        let ring_mode = self.is_ring();
        let slot = &mut self.slots[idx as usize];
        slot.op = op;
        slot.tag = tag;
        match (&mut self.ring, ring_mode) {
            (Some(ring), true) => {
                let statx_buf = std::ptr::addr_of_mut!(slot.statx).cast::<types::statx>();
                let entry = match op {
                    Op::Statx { dirfd, path, flags, mask } => {
                        opcode::Statx::new(types::Fd(dirfd), path, statx_buf).flags(flags).mask(mask).build()
                    }
                    Op::OpenAt { dirfd, path, flags } => {
                        opcode::OpenAt::new(types::Fd(dirfd), path).flags(flags).mode(0).build()
                    }
                    Op::Read { fd, buf, len, offset } => {
                        opcode::Read::new(types::Fd(fd), buf, len).offset(offset).build()
                    }
                    Op::Close { fd } => opcode::Close::new(types::Fd(fd)).build(),
                }
                .user_data(u64::from(idx));
                // SAFETY: the entry's pointers are valid until its completion
                // (the caller's contract; the statx buffer is this slot's, fixed
                // in the boxed slice until the completion is reaped or the slots
                // are leaked). The queue has room: it holds at least as many
                // entries as there are slots.
                let pushed = unsafe { ring.submission().push(&entry) };
                debug_assert!(pushed.is_ok());
                if pushed.is_err() {
                    // Cannot happen (see above); run it synchronously instead.
                    slot.res = run_sync(&op, &mut slot.statx);
                    self.ready.push(idx);
                } else {
                    self.queued += 1;
                }
            }
            _ => {
                slot.res = run_sync(&op, &mut slot.statx);
                self.ready.push(idx);
            }
        }
    }

    /// Closes `fd` with `IORING_OP_CLOSE` when on a ring and there is room,
    /// else with `close(2)`. Its completion is never delivered.
    pub(crate) fn close(&mut self, fd: OwnedFd) {
        if self.is_ring() && self.has_room() {
            // SAFETY: the descriptor is taken over by the close operation.
            unsafe { self.push(Op::Close { fd: fd.into_raw_fd() }, CLOSE_TAG) };
        } else {
            drop(fd);
        }
    }

    /// Delivers at least `want` completions (fewer only when fewer are
    /// outstanding), plus any others already available, to `f(tag, res,
    /// statx)`, where `res` is the system call's result or `-errno`.
    pub(crate) fn reap(&mut self, want: usize, f: &mut dyn FnMut(u64, i32, &libc::statx)) -> usize {
        self.shared.late_kernel_writes();
        let mut delivered = 0;
        while let Some(idx) = self.ready.pop() {
            delivered += self.deliver(idx, f);
        }
        if self.ring.is_none() {
            return delivered;
        }
        loop {
            let pending = self.queued + self.in_flight;
            if pending == 0 {
                break;
            }
            let wait = if delivered < want { (want - delivered).min(pending) } else { 0 };
            if self.queued > 0 || wait > 0 {
                let ring = self.ring.as_mut().expect("ring");
                let entered = match ring.submit_and_wait(wait) {
                    Ok(_) if self.shared.simulated_enter_failure() => {
                        Err(std::io::Error::from_raw_os_error(libc::EBADFD))
                    }
                    other => other,
                };
                match entered {
                    Ok(_) => {}
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
                    Err(e) => {
                        self.fatal(&e);
                        while let Some(idx) = self.ready.pop() {
                            delivered += self.deliver(idx, f);
                        }
                        return delivered;
                    }
                }
                let ring = self.ring.as_mut().expect("ring");
                let now_queued = ring.submission().len();
                self.in_flight += self.queued - now_queued;
                self.queued = now_queued;
            }
            let mut got = 0;
            loop {
                let Some(cqe) = self.ring.as_mut().expect("ring").completion().next() else { break };
                self.in_flight -= 1;
                got += 1;
                let idx = u32::try_from(cqe.user_data()).unwrap_or(u32::MAX);
                if idx as usize >= self.slots.len() {
                    continue;
                }
                self.complete(idx, cqe.result());
                delivered += self.deliver(idx, f);
            }
            if delivered >= want || (got == 0 && wait == 0) {
                break;
            }
        }
        delivered
    }

    /// Delivers everything outstanding.
    pub(crate) fn drain(&mut self, f: &mut dyn FnMut(u64, i32, &libc::statx)) {
        while self.outstanding() > 0 {
            let before = self.outstanding();
            self.reap(before, f);
            if self.outstanding() == before && self.ready.is_empty() && self.queued + self.in_flight == 0 {
                break;
            }
        }
    }

    /// Waits for room: reaps a fraction of what is in flight.
    pub(crate) fn make_room(&mut self, f: &mut dyn FnMut(u64, i32, &libc::statx)) {
        while !self.has_room() {
            let want = (self.outstanding() / self.config.wait_divisor.max(1) as usize).max(1);
            self.reap(want, f);
        }
    }

    /// Records a ring completion in its slot, turning a refusal (`EINVAL`,
    /// real or simulated) into a synchronous retry.
    fn complete(&mut self, idx: u32, mut res: i32) {
        let slot = &mut self.slots[idx as usize];
        let op = slot.op;
        if matches!(op, Op::Close { .. }) {
            slot.res = res;
            return;
        }
        let mut simulated = false;
        if self.shared.einval_at > 0 {
            let n = self.shared.completions.fetch_add(1, Ordering::Relaxed) + 1;
            if n == self.shared.einval_at {
                if let (Op::OpenAt { .. }, fd) = (op, res) {
                    if fd >= 0 {
                        // SAFETY: the ring opened this descriptor for us and nothing
                        // else knows it; the simulated refusal discards it.
                        unsafe { libc::close(fd) };
                    }
                }
                res = -libc::EINVAL;
                simulated = true;
            }
        }
        if res == -libc::EINVAL {
            self.shared.degrade(format!("{} completed with EINVAL", op.name()), !simulated);
            res = run_sync(&op, &mut slot.statx);
        }
        slot.res = res;
    }

    fn deliver(&mut self, idx: u32, f: &mut dyn FnMut(u64, i32, &libc::statx)) -> usize {
        let slot = &self.slots[idx as usize];
        let n = if slot.tag == CLOSE_TAG {
            0
        } else {
            f(slot.tag, slot.res, &slot.statx);
            1
        };
        self.free.push(idx);
        n
    }

    /// The ring failed in a way that leaves in-flight operations unknown:
    /// leak it and its slots (their `statx` buffers included), fail every
    /// outstanding operation with `EIO`, and go on synchronously. The
    /// owners of those operations' buffers, paths and descriptors see
    /// [`Pipeline::poisoned`] and leak them (module docs).
    fn fatal(&mut self, e: &std::io::Error) {
        tracing::error!(error = %e, "io_uring_enter failed; abandoning the ring");
        self.shared.degrade(format!("io_uring_enter failed: {e}"), false);
        self.poisoned = true;
        let outstanding: Vec<(Op, u64)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.free.contains(&(*i as u32)) && !self.ready.contains(&(*i as u32)))
            .map(|(_, s)| (s.op, s.tag))
            .collect();
        let ready: Vec<(Op, u64, i32, libc::statx)> = self
            .ready
            .iter()
            .map(|&i| {
                (
                    self.slots[i as usize].op,
                    self.slots[i as usize].tag,
                    self.slots[i as usize].res,
                    self.slots[i as usize].statx,
                )
            })
            .collect();
        #[cfg(test)]
        {
            let mut late = self.shared.late.lock().unwrap_or_else(|p| p.into_inner());
            for (op, _) in &outstanding {
                if let Op::Read { buf, len, .. } = *op {
                    late.0.push((buf as usize, len as usize));
                }
            }
        }
        let n = self.slots.len();
        let old = mem::replace(&mut self.slots, (0..n).map(|_| Slot::empty()).collect());
        mem::forget(old);
        if let Some(ring) = self.ring.take() {
            mem::forget(ring);
        }
        self.free = (0..n as u32).rev().collect();
        self.ready.clear();
        self.queued = 0;
        self.in_flight = 0;
        for (op, tag, res, statx) in ready {
            let idx = self.free.pop().expect("room");
            let s = &mut self.slots[idx as usize];
            (s.op, s.tag, s.res, s.statx) = (op, tag, res, statx);
            self.ready.push(idx);
        }
        for (op, tag) in outstanding {
            if tag == CLOSE_TAG {
                continue;
            }
            let idx = self.free.pop().expect("room");
            let s = &mut self.slots[idx as usize];
            (s.op, s.tag, s.res) = (op, tag, -libc::EIO);
            self.ready.push(idx);
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Descriptors opened for completions nobody will receive.
        let orphan = |slot: &Slot| {
            if let (Op::OpenAt { .. }, fd) = (slot.op, slot.res) {
                if fd >= 0 {
                    // SAFETY: an undelivered openat result is a descriptor only
                    // this slot knows.
                    unsafe { libc::close(fd) };
                }
            }
        };
        for &idx in &self.ready {
            orphan(&self.slots[idx as usize]);
        }
        let Some(ring) = self.ring.as_mut() else { return };
        // Wait for what the kernel has, without submitting what it has not
        // seen (those entries' pointers may already be gone).
        while self.in_flight > 0 {
            // SAFETY: no submission (`to_submit` 0), no argument.
            let r = unsafe {
                ring.submitter().enter::<libc::sigset_t>(0, self.in_flight as u32, EnterFlags::GETEVENTS.bits(), None)
            };
            if let Err(e) = r {
                if e.raw_os_error() != Some(libc::EINTR) {
                    let slots = mem::take(&mut self.slots);
                    mem::forget(slots);
                    self.poisoned = true;
                    return;
                }
            }
            let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (ud, res) in done {
                self.in_flight -= 1;
                if let Some(slot) = self.slots.get_mut(ud as usize) {
                    slot.res = res;
                    orphan(slot);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn stat_root(p: &mut Pipeline) -> (i32, u64) {
        let dir = std::fs::File::open("/").unwrap();
        let mut got = (1, 0);
        // SAFETY: the path is a static string; `dir` outlives the drain.
        unsafe {
            p.push(
                Op::Statx {
                    dirfd: dir.as_raw_fd(),
                    path: c".".as_ptr(),
                    flags: libc::AT_SYMLINK_NOFOLLOW,
                    mask: libc::STATX_INO,
                },
                7,
            )
        };
        p.drain(&mut |tag, res, st| {
            assert_eq!(tag, 7);
            got = (res, st.stx_ino);
        });
        got
    }

    #[test]
    fn ring_and_sync_agree() {
        let cfg = RingConfig::default();
        let mut ring = Pipeline::new(&cfg, Shared::new());
        let mut sync = Pipeline::synchronous(&cfg, Shared::new());
        let a = stat_root(&mut ring);
        let b = stat_root(&mut sync);
        assert_eq!(a.0, 0);
        assert_eq!(a, b);
    }

    #[test]
    fn simulated_einval_degrades_and_retries() {
        let cfg = RingConfig::default();
        let shared = Shared::with_einval_at(Some(1));
        let mut p = Pipeline::new(&cfg, shared.clone());
        if !p.is_ring() {
            return; // io_uring unavailable here: nothing to simulate
        }
        let (res, ino) = stat_root(&mut p);
        assert_eq!(res, 0);
        assert_ne!(ino, 0);
        assert!(shared.degraded());
        assert!(shared.why().unwrap().contains("IORING_OP_STATX"));
        assert!(!p.is_ring());
        // Later operations are synchronous.
        assert_eq!(stat_root(&mut p).0, 0);
    }
}
