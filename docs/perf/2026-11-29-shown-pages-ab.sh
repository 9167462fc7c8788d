#!/bin/bash
# The A/B of docs/perf/2026-11-29-shown-pages.md: same_host = map (pages read in place shown
# from their home's memory, mapped) against memory (copied from it), the same binaries, rounds
# interleaved. Prints "setting what value shmem_peak_mb" per run: MB/s for stream, compute
# seconds for the apps; shmem_peak_mb: the machine's shared memory (/proc/meminfo Shmem, where
# every node's memory file counts) at its highest during the run, above what it was before.
# Usage: 2026-11-29-shown-pages-ab.sh ROUNDS   (R: the binaries, default target/release)
R=${R:-target/release}
shmem() { awk '/^Shmem:/{print $2}' /proc/meminfo; }
one() { # setting, label, field, transport, nodes, program and arguments
  local s=$1 what=$2 field=$3 t=$4 n=$5; shift 5
  local base peak f out
  base=$(shmem); peak=$base; f=$(mktemp)
  ( timeout 300 "$R/dsmrun" -n "$n" --transport "$t" --set same_host=$s "$R/$@" >"$f" 2>&1 ) &
  local job=$!
  while kill -0 $job 2>/dev/null; do
    local now; now=$(shmem); [ "$now" -gt "$peak" ] && peak=$now; sleep 0.02
  done
  out=$(grep -o "$field=[0-9.]*" "$f" | head -1 | cut -d= -f2); rm -f "$f"
  echo "$s $what ${out:-FAILED} $(( (peak - base) / 1024 ))"
}
for i in $(seq 1 "$1"); do
  if [ $((i % 2)) = 1 ]; then order="memory map"; else order="map memory"; fi
  for s in $order; do
    one $s stream256-udp mbps udp 2 stream 256
    one $s stream256-tcp mbps tcp 2 stream 256
    one $s matmul2048x2 time udp 2 matmul --no-check 2048
    one $s matmul2048x4 time udp 4 matmul --no-check 2048
    one $s matmul1024x16 time udp 16 matmul --no-check 1024
    one $s lu2048/64x2 time udp 2 lu --no-check 2048 64
    one $s sor2048x100x2 time udp 2 sor --no-check 2048 100
  done
done
