//! Locking the guardian's mutexes: [`lock`] takes the data even if a holder
//! panicked (the engine's rule, [`winx_release_kernel::sys::lock`]), so one
//! failed request does not turn every later one into a failure.

pub(crate) use winx_release_kernel::sys::lock;
