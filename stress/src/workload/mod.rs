//! The workload: the steps a session runs ([`scenarios`]), the tool
//! operations and the checks of their answers ([`ops`]), opening a session
//! ([`opening`]), the seeded random numbers ([`rng`]), the fill plan of the
//! setup ([`fill_plan`]), the backing-root filler ([`backing`]), and the
//! state the workers share ([`world`]).

pub mod backing;
pub mod chaos;
pub mod fill_plan;
pub mod opening;
pub mod ops;
pub mod rng;
pub mod scenarios;
pub mod world;
