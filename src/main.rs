//! The `winx-release` binary: a thin shim over `winx-release-tools`.
#![deny(unsafe_code)]

fn main() -> std::process::ExitCode {
    winx_release_tools::main()
}
