//! The `winx-release` binary: a thin shim over `winx-release-tools`.
#![deny(unsafe_code)]

#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    winx_release_tools::main()
}
