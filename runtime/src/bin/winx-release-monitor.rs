//! `winx-release-monitor`: the monitor of one execution
//! (`winx_release_runtime::monitor`) as a program of its own, smaller than
//! the program that starts it. A runtime uses it when it lies beside that
//! program (cargo's tests and examples find it so) or when
//! `WINX_RELEASE_MONITOR` names it.
#![deny(missing_docs)]
#![deny(unsafe_code)]

fn main() {
    winx_release_runtime::monitor::enter();
    eprintln!(
        "winx-release-monitor is started by winx-release for each command it runs; it takes no arguments of yours"
    );
    std::process::exit(2);
}
