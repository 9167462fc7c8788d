#!/bin/bash
# The A/B of docs/perf/2026-11-29-sor-on-2-nodes.md: sor 2048 x 100 on 2 nodes, the build before
# issue 40 (A) against today's (B) with huge_pages=off and with the default (auto), each right
# after a 2-node matmul 4096 of the same build and settings, then once more; the three in a
# rotating order per round. Prints "what matmul_s sor_s sor_again_s" per run.
# Usage: A=DIR B=DIR 2026-11-29-sor-on-2-nodes-ab.sh ROUNDS   (DIR: a build's target/release)
# With ALONE=1: sor alone, A against B's default, in alternating order ("what sor_s").
set -u
secs() { grep -o "time=[0-9.]*" | head -1 | cut -d= -f2; }
names=(A Boff Bauto)
[ "${ALONE:-0}" = 1 ] && names=(A Bauto)
k=${#names[@]}
for i in $(seq 1 "$1"); do
  for j in $(seq 0 $((k - 1))); do
    what=${names[$(((i + j) % k))]}
    case $what in
      A) dir=$A; set_=() ;;
      Boff) dir=$B; set_=(--set huge_pages=off) ;;
      Bauto) dir=$B; set_=() ;;
    esac
    sor() { timeout 120 "$dir/dsmrun" -n 2 "${set_[@]}" "$dir/sor" --no-check 2048 100 2>&1 | secs; }
    if [ "${ALONE:-0}" = 1 ]; then
      echo "$what $(sor)"
    else
      m=$(timeout 300 "$dir/dsmrun" -n 2 "${set_[@]}" "$dir/matmul" --no-check 4096 2>&1 | secs)
      echo "$what ${m:-FAILED} $(sor) $(sor)"
    fi
  done
done
