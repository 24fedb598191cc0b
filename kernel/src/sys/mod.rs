//! Small system services the engine's parts share, and an embedder may use:
//! locks that survive a panicked holder, randomness from the kernel,
//! durable writes of small files with group-committed directory `fsync`s,
//! a descriptor table grown once for the descriptors the engine's caches
//! keep (their budget comes from the caller,
//! `release::reserve_descriptor_table`), and processes remembered by pidfd.
//!
//! They are public because a guardian built on the engine needs the same
//! first three with the same guarantees (a guardian's session table, its
//! instance id, its data directory), and each has exactly one copy here.
//!
//! # References
//! - [`getrandom(2)`](https://man7.org/linux/man-pages/man2/getrandom.2.html)
//! - [`fsync(2)`](https://man7.org/linux/man-pages/man2/fsync.2.html)
//! - [`rename(2)`](https://man7.org/linux/man-pages/man2/rename.2.html)

mod cores;
mod durable;
mod fd_table;
// `fcntl(F_SETLEASE)`, which rustix does not wrap: its `unsafe` is fenced
// in that one file, as `generation.rs`'s ioctl is.
#[allow(unsafe_code)]
mod lease;
mod lock;
// `getsockopt(SO_PEERPIDFD)`, which neither rustix nor libc names yet.
#[allow(unsafe_code)]
mod peer;
mod pidfds;
mod random;
mod regular;
mod reserved;

pub use cores::cores;
pub use durable::{create_private_dir_all, fsync_dir, write_durable};
pub use fd_table::{cache_share, grow_descriptor_table};
pub use lease::{open_elsewhere, OpenElsewhere};
pub use lock::lock;
pub use peer::peer_pidfd;
pub use pidfds::pidfd_of;
pub use pidfds::Remembered;
pub use random::random_hex;
pub use regular::open_regular;
pub use reserved::Reserved;
