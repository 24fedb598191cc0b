//! `winx-release status`: whether a guardian answers on the socket a
//! frontend would use, and what it holds.

use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};
use winx_release_protocol::client::{ClientError, GuardianClient};

use crate::common::{print_json, quick, EXIT_FAILURE, EXIT_OK};

/// Arguments of `winx-release status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Guardian socket (default: as for `mcp`).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// One JSON object instead of lines for a person.
    #[arg(long)]
    pub json: bool,
}

/// Asks the guardian at the resolved socket (after the trust checks a
/// frontend makes) for its status. Exit 0 when one answers, 1 when none
/// does (with the reason).
pub fn run(args: &StatusArgs) -> anyhow::Result<u8> {
    let socket = winx_release_protocol::resolve_socket_path(args.socket.as_deref());
    let v = match status_of(&socket) {
        Ok(v) => v,
        Err(e) => {
            let v = json!({"running": false, "socket": socket, "error": e.to_string()});
            if args.json {
                print_json(&v)?;
            } else {
                outln!("no guardian answers at {}: {e}", socket.display())?;
                outln!(
                    "a frontend (`winx-release mcp`) starts one at Initialize; or run `winx-release guardian` yourself"
                )?;
            }
            return Ok(EXIT_FAILURE);
        }
    };
    if args.json {
        print_json(&v)?;
    } else {
        print_human(&v)?;
    }
    Ok(EXIT_OK)
}

/// The status object of the guardian at `socket`.
fn status_of(socket: &std::path::Path) -> Result<Value, ClientError> {
    let (mut client, hello) = GuardianClient::connect_hello(socket, quick())?;
    let mut v = json!({"running": true, "socket": socket, "pid": hello.pid, "guardian": hello.guardian,
        "instance": hello.instance, "liveness": hello.liveness, "capabilities": hello.capabilities});
    match client.guardian_status() {
        Ok(s) => {
            v["data_dir"] = json!(s.data_dir);
            v["sessions"] = json!(s.sessions);
            v["running_executions"] = json!(s.running);
        }
        // An older guardian: what its hello said.
        Err(ClientError::Unsupported(_)) => v["note"] = json!("this guardian does not answer guardian_status"),
        Err(e) => return Err(e),
    }
    Ok(v)
}

fn print_human(v: &Value) -> std::io::Result<()> {
    let s = |k: &str| v[k].as_str().unwrap_or("?").to_owned();
    outln!("guardian {} answers at {}", s("guardian"), s("socket"))?;
    outln!("  pid {}, liveness {}, data directory {}", v["pid"], s("liveness"), s("data_dir"))?;
    let sessions = v["sessions"].as_array().cloned().unwrap_or_default();
    outln!("  sessions: {}", sessions.len())?;
    for x in &sessions {
        outln!(
            "    thread {} in {} (mode {}), {} running",
            x["thread_id"].as_str().unwrap_or("?"),
            x["workspace"].as_str().unwrap_or("?"),
            x["mode_name"].as_str().unwrap_or("not recorded"),
            x["running"]
        )?;
    }
    let running = v["running_executions"].as_array().cloned().unwrap_or_default();
    outln!("  running executions: {}", running.len())?;
    for e in &running {
        outln!(
            "    {} (thread {}, {}{})",
            e["command_id"].as_str().unwrap_or("?"),
            e["thread_id"].as_str().unwrap_or("?"),
            e["state"].as_str().unwrap_or("?"),
            if e["background"] == json!(true) { ", background" } else { "" }
        )?;
    }
    if let Some(n) = v["note"].as_str() {
        outln!("  {n}")?;
    }
    outln!("  stop it with `winx-release guardian --stop` (refused while an execution runs, unless --force)")?;
    Ok(())
}
