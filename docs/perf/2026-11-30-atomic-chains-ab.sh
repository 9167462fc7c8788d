#!/bin/bash
# A/B of atomic chains: the build before (a worktree of 24a78b4, built into /tmp/wt-a-target) against this one.
# hist: docs/perf/2026-11-30-atomic-histogram.c built with DSMCC_CC=clang dsmcc -O2 by each build.
OLD=/tmp/wt-a-target/release; NEW=/work/main/target/release
for r in 1 2 3 4 5; do
  for v in old new; do
    if [ $v = old ]; then D=$OLD; else D=$NEW; fi
    for n in 2 3 4; do
      /usr/bin/time -o /tmp/t.txt -f "%e" $D/dsmrun -n $n /tmp/hist-$v 30000 >/tmp/h.txt 2>/dev/null; grep -q "0 wrong" /tmp/h.txt || echo WRONG; t=$(cat /tmp/t.txt)
      echo "hist n=$n $v $t"
    done
    w=$($D/dsmrun -n 4 $D/workq 2000 20000 --no-check 2>/dev/null | grep -o "time=[0-9.]*")
    echo "workq n=4 $v $w"
  done
done
