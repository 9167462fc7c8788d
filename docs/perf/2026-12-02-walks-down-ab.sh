#!/usr/bin/env bash
# Walks down against walks up, build A against build B, ROUNDS rounds interleaved (the builds'
# order alternating): node 1 of 2 reads 64 MB homed on node 0 up, then another 64 MB down,
# every page and one page in 16 (2026-12-02-walks-down.c), UDP and TCP; `stream 256` (up, every
# page) and the remote read fault (faultlat, prefetch off) for what walks up lose, if anything.
#   A=DIR B=DIR docs/perf/2026-12-02-walks-down-ab.sh [ROUNDS]   (DIR: a build's target/release)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-5}
tmp=$(mktemp -d)
for side in A B; do
    dir=$(cd "${!side}" && pwd)
    cc -O2 docs/perf/2026-12-02-walks-down.c -o "$tmp/walks-$side" -Ijia/include -L"$dir" \
        -ljia -lpthread -ldl -lm -Wl,-rpath,"$dir"
done
for r in $(seq "$rounds"); do
    order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
    for side in $order; do
        dir=${!side}
        for t in udp tcp; do
            for s in 1 16; do
                echo "round=$r side=$side transport=$t $("$dir/dsmrun" -n 2 --transport $t "$tmp/walks-$side" 64 $s | grep walks)"
            done
        done
        echo "round=$r side=$side $("$dir/dsmrun" -n 2 "$dir/stream" 256 --no-check | grep -o 'mbps=[0-9]*')"
        echo "round=$r side=$side faultlat $("$dir/dsmrun" -n 2 --set prefetch=off "$dir/faultlat" 2>&1 | grep -i -m1 'remote read')"
    done
done
rm -rf "$tmp"
