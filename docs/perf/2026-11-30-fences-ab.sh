#!/bin/bash
# A/B of small atomics and fences: the build before them (a worktree of 7d59ff7, built into
# /tmp/wt-a-target: `git worktree add /tmp/wt-a 7d59ff7 && cd /tmp/wt-a &&
# CARGO_TARGET_DIR=/tmp/wt-a-target cargo build --release`) against this one, 5 rounds
# interleaved. faultlat's atomic rows; workq on 4 nodes (acq-rel and relaxed fetch-adds).
OLD=/tmp/wt-a-target/release; NEW=/work/main/target/release
for r in 1 2 3 4 5; do
  for v in old new; do
    if [ $v = old ]; then D=$OLD; else D=$NEW; fi
    $D/dsmrun -n 2 --set prefetch=off $D/faultlat 2>&1 |
      grep -E "remote atomic fetch-add, (relaxed|acq_rel) |means of 200000" |
      sed "s/^/$v /"
    w=$($D/dsmrun -n 4 $D/workq 2000 20000 --no-check 2>/dev/null | grep -o "time=[0-9.]*")
    echo "$v workq n=4 $w"
  done
done
