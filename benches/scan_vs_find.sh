#!/usr/bin/env bash
# Side-by-side scan timings: `find ROOT -printf '%D %i %s\n'` against
# `winx-release scan --backend sync|threads|uring|auto ROOT` (lean: no
# sizes) and `scan --sizes --backend auto`, interleaved round by
# round (so load drifts hit every command alike), warm cache. Prints each
# command's median and minimum wall time and its median ratio to find's,
# plus the one-minute load average before and after.
#
#   benches/scan_vs_find.sh [ROUNDS] [ROOT]
#
# ROOT defaults to the 50,000-entry bench tree (16-level chains) that
# `cargo bench --bench scan_throughput` creates; the binary is
# $WINX_RELEASE (default target/release/winx-release).
set -euo pipefail
rounds=${1:-21}
root=${2:-${WINX_BENCH_DIR:-${TMPDIR:-/tmp}/winx-bench-trees-$(id -u)}/scan-50k}
bin=${WINX_RELEASE:-target/release/winx-release}
[ -d "$root" ] || { echo "no tree at $root (run: cargo bench --bench scan_throughput)" >&2; exit 2; }
[ -x "$bin" ] || { echo "no binary at $bin (run: cargo build --release)" >&2; exit 2; }
cmds=(
  "find $root -printf '%D %i %s\n'"
  "$bin scan --backend sync $root"
  "$bin scan --backend threads $root"
  "$bin scan --backend uring $root"
  "$bin scan --backend auto $root"
  "$bin scan --sizes --backend auto $root"
)
declare -A times
now() { date +%s%N; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)   cores: $(nproc)"
for c in "${cmds[@]}"; do bash -c "$c" >/dev/null 2>&1 || true; done   # warm the cache
for ((r = 0; r < rounds; r++)); do
  for i in "${!cmds[@]}"; do
    t0=$(now); bash -c "${cmds[$i]}" >/dev/null 2>&1 || true; t1=$(now)
    times[$i]+="$(( (t1 - t0) / 1000 )) "
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
minimum() { tr ' ' '\n' | grep . | sort -n | head -1; }
base=$(echo "${times[0]}" | median)
for i in "${!cmds[@]}"; do
  m=$(echo "${times[$i]}" | median); lo=$(echo "${times[$i]}" | minimum)
  CMD="${cmds[$i]}" awk -v m="$m" -v lo="$lo" -v b="$base" \
    'BEGIN { printf "%9.1f ms  min %9.1f ms  ratio %.2f  %s\n", m / 1000, lo / 1000, m / b, ENVIRON["CMD"] }'
done
echo "load after:  $(cut -d' ' -f1-3 /proc/loadavg)"
