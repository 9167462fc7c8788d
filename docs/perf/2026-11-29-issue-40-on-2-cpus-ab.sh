#!/bin/bash
# The A/B of docs/perf/2026-11-29-issue-40-on-2-cpus.md: issue 40's targets on 2 CPUs, the build
# before the issue (A) against today's (B), rounds interleaved (the builds' order alternating).
# Prints "build what nodes value" per run: compute seconds as the apps print them, the remote
# read fault's median in microseconds (faultlat, prefetch off).
# Usage: A=DIR B=DIR 2026-11-29-issue-40-on-2-cpus-ab.sh ROUNDS   (DIR: a build's target/release)
set -u
run() { # build dir, label, nodes, program and arguments
  local b=$1 dir=$2 what=$3 n=$4; shift 4
  local out t
  out=$(timeout 300 "$dir/dsmrun" -n "$n" "$dir/$@" 2>&1)
  t=$(echo "$out" | grep -o "time=[0-9.]*" | head -1 | cut -d= -f2)
  echo "$b $what $n ${t:-FAILED}"
}
for i in $(seq 1 "$1"); do
  if [ $((i % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for b in $order; do
    if [ $b = A ]; then dir=$A; else dir=$B; fi
    for n in 1 2; do
      run $b "$dir" matmul4096 $n matmul --no-check 4096
      run $b "$dir" matmul2048 $n matmul --no-check 2048
      run $b "$dir" sor2048x100 $n sor --no-check 2048 100
      run $b "$dir" lu2048/64 $n lu --no-check 2048 64
    done
    f=$(timeout 300 "$dir/dsmrun" -n 2 --set prefetch=off "$dir/faultlat" 2>&1 \
        | awk '/^remote read fault \(GETP\)/{print $5}')
    echo "$b faultlat_us 2 ${f:-FAILED}"
  done
done
