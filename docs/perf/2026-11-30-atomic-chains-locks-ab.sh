#!/bin/bash
# Lock-based apps on 4 nodes: the build before atomic chains (a worktree of 24a78b4 built into /tmp/wt-a-target) against this one.
OLD=/tmp/wt-a-target/release; NEW=/work/main/target/release
for r in 1 2 3 4 5; do
  for v in old new; do
    if [ $v = old ]; then D=$OLD; else D=$NEW; fi
    echo "water $v $($D/dsmrun -n 4 $D/water 2048 4 2>/dev/null | grep -o 'time=[0-9.]*')"
    echo "tsp $v $($D/dsmrun -n 4 $D/tsp 2>/dev/null | grep -o 'time=[0-9.]*')"
  done
done
