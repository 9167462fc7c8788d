#!/bin/bash
# The A/B runs of docs/perf/2026-11-29-huge-pages.md, from the project's root after
# `cargo build --release` and `gcc -O2 -o /tmp/huge-pages docs/perf/2026-11-29-huge-pages.c` (root).
# Usage: 2026-11-29-huge-pages-ab.sh ROUNDS streams|cold|ratio
#   streams: stream 256 on 2 nodes, UDP and TCP, huge_pages auto and off, as the machine is and
#            after 1 GB of huge pages was freed ("warm"), interleaved
#   cold:    the same with 5 s of idle before every run (this VM's host takes freed memory back)
#   ratio:   a plain TCP stream, then the four DSM streams, each warm
# Prints one line per run: round, condition, transport, setting, MB/s, node 1's huge_stretches
# and huge_stretches_slow.
set -u
rounds=$1 what=$2
hp=/tmp/huge-pages
dsm() {
    target/release/dsmrun -n 2 --stats --transport "$2" --set huge_pages="$1" target/release/stream 256 2>&1 |
        awk '/mbps/ { for (i = 1; i <= NF; i++) if ($i ~ /^mbps=/) { split($i, a, "="); m = a[2] } }
             /^huge_stretches / { h = $3 } /^huge_stretches_slow/ { s = $3 }
             END { printf "%s %s %s", m, h + 0, s + 0 }'
}
for r in $(seq 1 "$rounds"); do
    case $what in
    streams) for cond in asis warm; do for t in udp tcp; do for h in auto off; do
        [ "$cond" = warm ] && $hp 0 4 1024
        echo "$r $cond $t $h $(dsm $h $t)"
    done; done; done ;;
    cold) for t in udp tcp; do for h in auto off; do
        sleep 5
        echo "$r cold $t $h $(dsm $h $t)"
    done; done ;;
    ratio)
        echo "$r plain tcp - $($hp 256 0 | sed 's/.*s: \([0-9]*\) MB.*/\1/') 0 0"
        for t in udp tcp; do for h in auto off; do
            $hp 0 4 1024
            echo "$r warm $t $h $(dsm $h $t)"
        done; done ;;
    *) echo "usage: $0 ROUNDS streams|cold|ratio" >&2; exit 2 ;;
    esac
done
