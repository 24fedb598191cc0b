#!/bin/sh
# Runs a command with N idle processes of the user beside it (issue 57):
# `sleep` with its three standard descriptors on /dev/null, started before the command and killed, by their pids,
# after it. What a desktop (500-1,500 processes of the user) or a build host
# (thousands) has beside the guardian.
#
# Usage: benches/with_sleepers.sh N COMMAND [ARG ...]
# e.g.   benches/with_sleepers.sh 1000 target/release/winx-release stress --json --no-progress \
#            --mix release --sessions 16 --frontends 4 --duration 30 --seed 31
set -eu
n=$1
shift
pids=""
trap 'for p in $pids; do kill "$p" 2>/dev/null || true; done' EXIT INT TERM
i=0
while [ "$i" -lt "$n" ]; do
    sleep 3600 </dev/null >/dev/null 2>&1 &
    pids="$pids $!"
    i=$((i + 1))
done
"$@"
