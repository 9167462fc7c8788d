#!/usr/bin/env bash
# Pages read in place between nodes of one host (same_host = memory) against the transport
# (same_host = transport), interleaved, on this machine: docs/perf/2026-11-29-same-host-in-place.md.
# Usage: docs/perf/2026-11-29-same-host-in-place.sh ROUNDS   (binaries in target/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
bin=target/release
run() { # LABEL ARGS...
    local label=$1; shift
    local out
    out=$("$bin/dsmrun" "$@" 2>/dev/null | grep -E ' OK | UNCHECKED ' | grep -oE '(mbps|time)=[0-9.]+' | sort | head -1)
    echo "$label ${out:-failed}"
}
for r in $(seq "$rounds"); do
    for t in udp tcp; do
        for sh in memory transport; do
            run "stream256 $t $sh" -n 2 --transport $t --set same_host=$sh $bin/stream 256
        done
    done
    for sh in memory transport; do
        run "matmul2048 2x1 $sh" -n 2 --set same_host=$sh $bin/matmul 2048 --no-check
        run "matmul4096 2x1 $sh" -n 2 --set same_host=$sh $bin/matmul 4096 --no-check
        run "lu2048/64 2x1 $sh" -n 2 --set same_host=$sh $bin/lu 2048 64 --no-check
        run "sor2048x100 2x1 $sh" -n 2 --set same_host=$sh $bin/sor 2048 100 --no-check
        run "matmul2048 4x1 $sh" -n 4 --set same_host=$sh $bin/matmul 2048 --no-check
    done
done
