#!/bin/bash
# A/B, interleaved: A = the build before the reports on a clock of their own (7eaca1c), B = this tree (75067ca).
# Usage: 2026-12-01-report-clock-ab.sh A_RELEASE_DIR B_RELEASE_DIR ROUNDS
# faultlat (2 nodes, prefetch off), stream 256 (2 nodes), matmul 2048 (2 nodes, UDP and TCP).
set -u
A=$1; B=$2; N=${3:-5}
for r in $(seq 1 "$N"); do
  for side in A B; do
    d=$A; [ $side = B ] && d=$B
    echo "== round $r $side faultlat"
    "$d/dsmrun" -n 2 --set prefetch=off "$d/faultlat" 2>&1 | grep -E "^remote read fault|^lock acquire \+ release \(manager on"
    echo "== round $r $side stream"
    "$d/dsmrun" -n 2 "$d/stream" 256 2>&1 | grep -E "OK"
    for t in udp tcp; do
      echo "== round $r $side matmul $t"
      "$d/dsmrun" -n 2 --transport $t "$d/matmul" 2048 2>&1 | grep -E "OK"
    done
  done
done
