//! The stress tool (contract section 9).
//!
//! A run starts a real guardian and real MCP frontends (this executable as
//! `guardian` and `mcp`) in a private directory, with `XDG_DATA_HOME` and
//! `HOME` inside it and `XDG_RUNTIME_DIR` unset, so nothing of the user's is
//! touched. It talks to the frontends over their stdio with its own small
//! JSON-RPC client (`harness::client`).
//!
//! 1. **Setup** (`phases::setup`): sessions are filled to their quotas (128 files
//!    and 64 MiB each, tool writes for the files, commands for the bulk
//!    bytes, which quotas do not govern), workspace 0 to 256 MiB, and every
//!    quota is probed at its edge; the backing roots are filled with empty
//!    files to 50,000 entries (a release must complete) and 50,001 (it must
//!    fail closed), then held at `--backing-entries`; then every scenario
//!    runs once as a named check with its one expected answer.
//!    Then a command leaves processes behind and the guardian is SIGKILLed
//!    and restarted under it (`phases::liveness`).
//! 2. **Timed phase** (`phases::timed`): one worker per session runs a seeded
//!    random sequence of steps for `--duration` seconds: reads, releases,
//!    replays, audits, commands that block releases, adversarial changes
//!    (identical-text replacements before and during a release, new files
//!    at released names, links dropped into backing roots, tokens of another
//!    frontend, source files, other sessions' helpers).
//! 3. **Final verification**: every byte of the ledger re-hashed, every fill
//!    file of the backing roots accounted for, an audit per workspace.
//!
//! After each step the session is checked against the ledger (`oracle::ledger`)
//! of every byte the tool created: released only when pinned, nothing
//! lost, no overwrite, replays touch nothing, quotas held (`oracle::quota`).
//!
//! The code stands on four floors, each using only those below it:
//!
//! - `harness`: the private directory (`HOME`, `XDG_DATA_HOME`, the socket's
//!   directory), starting a guardian and waiting for its ready line, and
//!   the JSON-RPC clients over a frontend's stdio. Public: the end-to-end
//!   tests (`tests/e2e/support`) and the `shell_command` bench start their
//!   processes with it too.
//! - `oracle`: what the tool expects: the ledger of every byte it created,
//!   the findings, and its own account of the quotas.
//! - `workload`: the steps, their operations and checks, the random
//!   numbers, the fill plans, the backing-root filler, and the state the
//!   workers share (`world`).
//! - `phases`: a run from start to end (`run`), its setup, timed phase,
//!   release mix, final verification and report; the soak and the long run.

#![deny(missing_docs)]

pub mod harness;
mod oracle;
mod phases;
mod workload;

mod config;
mod progress;

pub use config::{Config, Mix, CALL_TIMEOUT};
pub use phases::cpu::CpuReport;
pub use phases::longrun;
pub use phases::report::Report;
pub use phases::run::run;
pub use phases::soak::{soak, SoakLine};
pub use workload::kills::ChaosReport;
