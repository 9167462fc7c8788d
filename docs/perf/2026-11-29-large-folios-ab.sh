#!/bin/bash
# The A/B of docs/perf/2026-11-29-large-folios.md: `stream 256` on 2 nodes, huge_pages=auto (large
# folios) against off, UDP and TCP, rounds interleaved. Prints "setting transport MB/s
# large_folio_requests-of-node-1" per run.
# Usage: 2026-11-29-large-folios-ab.sh ROUNDS [cold]   (cold: 5 s idle before every run, so this
# VM's host takes the freed memory back). R: the binaries (default target/release).
R=${R:-target/release}
for i in $(seq 1 "$1"); do
  for cfg in auto off; do
    for t in udp tcp; do
      [ "$2" = cold ] && sleep 5
      out=$(timeout 120 "$R/dsmrun" -n 2 --transport $t --set huge_pages=$cfg --stats "$R/stream" 256 2>&1)
      m=$(echo "$out" | grep -o "mbps=[0-9]*" | cut -d= -f2)
      l=$(echo "$out" | awk '/^large_folio_requests /{print $NF}')
      echo "$cfg $t $m $l"
    done
  done
done
