//! A run from start to end ([`run`]): the setup phase ([`setup`], its
//! edge checks [`edge_checks`] and the guardian restart under live
//! processes [`liveness`]), the timed phase ([`timed`]) or the release-only
//! mix ([`release_mix`]), the guardian kills of `--chaos` ([`chaos`]), the CPU split ([`cpu`]) and the report
//! ([`report`]); and the two other modes, the soak ([`soak`]) and the long
//! run ([`longrun`]).

pub mod chaos;
pub mod cpu;
pub mod edge_checks;
pub mod liveness;
pub mod longrun;
pub mod release_mix;
pub mod report;
pub mod run;
pub mod setup;
pub mod soak;
pub mod timed;
