#!/bin/bash
# A/B of two builds' binaries (dsmrun matmul lu sor stream copied into /tmp/ab-a and /tmp/ab-b),
# their order alternating by round. Usage: 2026-11-30-read-ahead-streams-ab.sh ROUNDS
# Prints "build case value": compute seconds as the apps print them, MB/s for the streams.
run() { # dir case args...
  local d=$1 c=$2; shift 2
  local out; out=$($d/dsmrun "$@" 2>/dev/null)
  local v; v=$(echo "$out" | grep -oE "mbps=[0-9]+" | head -1 | sed "s/mbps=//"); [ -z "$v" ] && v=$(echo "$out" | grep -oE "time=[0-9.]+s" | head -1 | sed "s/time=//;s/s$//")
  echo "$(basename $d) $c $v"
}
for r in $(seq 1 $1); do
  if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
  for v in $order; do
    d=/tmp/ab-$v
    for t in 1 2 4; do
      run $d stream256udp-t$t -n 2 --set same_host=transport $d/stream 256 --threads $t
    done
    run $d stream256tcp-t4 -n 2 --transport tcp --set same_host=transport $d/stream 256 --threads 4
    run $d stream256map-t4 -n 2 $d/stream 256 --threads 4
    run $d mm2048x16 -n 16 $d/matmul 2048 --no-check
    run $d mm2048x2t2 -n 2 $d/matmul 2048 --threads 2 --no-check
    run $d mm4096x2 -n 2 $d/matmul 4096 --no-check
    run $d lu2048x2 -n 2 $d/lu 2048 64 --no-check
    run $d sor2048x2 -n 2 $d/sor 2048 100 --no-check
    run $d lu2048x16 -n 16 $d/lu 2048 64 --no-check
  done
done
