#!/usr/bin/env bash
# The libraries another MCP server links (the kernel toolkit, the engine and
# host library) build on every platform winx ships for. Only the Linux standard
# library can be had here, so this checks what can be checked without it:
# 1. their normal dependencies for macOS and Windows, as cargo resolves them,
#    list no Linux-only crate (nor rustix at all: off Linux they do not use
#    it), while the same query for Linux does list them (the check can fail);
# 2. the non-Linux code path, built on Linux with `--cfg winx_foreign`
#    (without the Linux-only dependencies, which the manifests gate on that
#    cfg too), type-checks, and its tests pass: every release is
#    `unsupported_platform`, reads say so, and the runtime starts nothing:
#    every start answers `unsupported_platform`.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(winx-release-kernel winx-release-engine winx-release-host winx-release-runtime)
linux_only='^(io-uring|linux-raw-sys|rustix) '
for crate in "${crates[@]}"; do
    for target in x86_64-apple-darwin x86_64-pc-windows-msvc; do
        deps=$(cargo tree --locked --target "$target" -p "$crate" -e normal --prefix none)
        if grep -E "$linux_only" <<<"$deps"; then
            echo "foreign: $crate for $target pulls the Linux-only crates above" >&2
            exit 1
        fi
        echo "foreign: $crate for $target: $(sort -u <<<"$deps" | wc -l) crates, none Linux-only"
    done
    if ! cargo tree --locked --target x86_64-unknown-linux-gnu -p "$crate" -e normal --prefix none | grep -qE "$linux_only"; then
        echo "foreign: $crate for Linux lists no Linux-only crate: the check above proves nothing" >&2
        exit 1
    fi
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/foreign" RUSTFLAGS="--cfg winx_foreign"
# The test build compiles the libraries' non-Linux path (a separate
# `cargo check` would build every dependency a second time, in check mode).
# The engine's one test binary compiles only its `foreign` module there.
cargo test --locked -p winx-release-engine --test suite foreign::
cargo test --locked -p winx-release-host --test foreign
cargo test --locked -p winx-release-runtime --test foreign
# A host's code is the same everywhere: the example hosts, built as off
# Linux, run and end at their first `Initialize`'s `unsupported_platform`.
for example in winx_host tokio_host; do
    out=$(cargo run --locked -p winx-release-host --example "$example")
    echo "$out"
    grep -q unsupported_platform <<<"$out"
done
