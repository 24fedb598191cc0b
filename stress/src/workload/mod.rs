//! The workload: the steps a session runs ([`scenarios`]), the tool
//! operations and the checks of their answers ([`ops`]), opening a session
//! ([`opening`]), the seeded random numbers ([`rng`]), the fill plan of the
//! setup ([`fill_plan`]), the backing-root filler ([`backing`]), the state
//! the workers share ([`world`]), and guardian kills under load: what the
//! chaos task and the workers share ([`kills`]), a release a kill cut off
//! ([`interrupted`]) and how a worker carries on after one ([`chaos`]).

pub mod backing;
pub mod chaos;
pub mod fill_plan;
pub mod interrupted;
pub mod kills;
pub mod opening;
pub mod ops;
pub mod rng;
pub mod scenarios;
pub mod world;
