//! End-to-end tests: a real guardian, the MCP frontend and MCP clients, as
//! a user runs them. One test binary (each module was a test file of its
//! own): the client and runtime code is compiled and linked once, not once
//! per file. Run one module with `cargo test --test e2e executions::`.

mod support;

mod escapes;
mod executions;
mod guardian_crash;
mod limits;
mod liveness;
mod mcp_cancel;
mod mcp_host;
mod mcp_owner;
mod mcp_protocol;
mod mcp_release;
mod mcp_ts_sdk;
mod monitor;
mod nonroot;
mod operator;
mod provenance;
mod reclaimed;
mod retention;
mod shell;
mod shell_trust;
mod systemd;
mod trust;
