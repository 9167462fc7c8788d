#!/bin/sh
# Runs inside the Soft-RoCE VM (../shared/rdma-vm/run.sh), from the repository root, with the
# binaries of an RDMA build in $B (default target/rdma/release). Started by scripts/test-rdma.
#
#   in-vm.sh one          2 and 4 nodes in this VM over rxe0: apps exact on rdma-rc (one-sided
#                         reads on and off) and rdma-ud; runs of pages, strided walks and walks
#                         down exact (rdma-ud under DSM_IMPAIR); the transport conformance suite; a node
#                         killed (kill -9) or stopped (SIGSTOP) mid-job ends the job with an
#                         error naming it
#   in-vm.sh pair JOBID   one node in each of two VMs (run with --pair): apps exact over the cable
#
# Every failure prints what ran and its output, and the script exits non-zero.
B=${B:-target/rdma/release}
mode=$1
fails=0
log=$(mktemp)

check() { # check NAME EXPECTED-TEXT COMMAND... : the command exits 0 and prints EXPECTED-TEXT
  name=$1 want=$2; shift 2
  start=$(date +%s)
  timeout 300 "$@" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ] && { [ -z "$want" ] || grep -q "$want" "$log"; }; then
    echo "ok   $name (${took}s): $(grep "${want:-.}" "$log" | head -1)"
  else
    echo "FAIL $name (rc=$rc, ${took}s): $*"
    sed 's/^/     | /' "$log" | tail -30
    fails=$((fails + 1))
  fi
}

running() { # running: wait (up to 60 s) until every node of the probe job has passed its barrier
  i=0
  while [ $i -lt 600 ] && ! grep -q 'probe: node . running' "$log"; do
    sleep 0.1; i=$((i + 1))
  done
}

newest() { # newest PREFIX: the newest process whose command line starts with PREFIX (no pgrep
  # here), looked for up to 5 s: a look that meets processes ending meanwhile may find none
  n=0
  while [ $n -lt 50 ]; do
    found=$(for d in /proc/[0-9]*; do
      { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null | grep -q "^$1" && echo "${d#/proc/}"
    done | sort -n | tail -1)
    [ -n "$found" ] && { echo "$found"; return 0; }
    sleep 0.1; n=$((n + 1))
  done
}

apps() { # apps PREFIX RUNNER...
  prefix=$1; shift
  check "$prefix matmul" "matmul OK" "$@" "$B/matmul" 192 f64
  check "$prefix sor" "sor OK" "$@" "$B/sor" 128 10
  check "$prefix lu" "lu OK" "$@" "$B/lu" 128 16
}

case $mode in
one)
  for t in rdma-rc rdma-ud; do
    apps "$t 2 nodes" "$B/dsmrun" -n 2 --transport $t
  done
  apps "rdma-rc 2 nodes, one-sided reads off" "$B/dsmrun" -n 2 --transport rdma-rc --set one_sided_reads=off
  for t in rdma-rc rdma-ud; do
    check "$t 4 nodes matmul" "matmul OK" "$B/dsmrun" -n 4 --transport $t "$B/matmul" 192 f64
  done
  check "rdma-rc C matmul on jia.h" "OK" "$B/dsmrun" -n 2 --transport rdma-rc "$B/c-matmul" 128
  # Runs of pages (read-ahead windows, a cache smaller than the stream) and a strided walk
  # arrive exact: over rdma-ud with its datagrams dropped, duplicated and reordered, over
  # rdma-rc as they are (its queue pairs are reliable; DSM_IMPAIR is refused there).
  imp="drop=3,dup=2,reorder=10,delay_us=300,seed=21"
  for t in rdma-rc rdma-ud; do
    i=""; [ $t = rdma-ud ] && i=$imp
    check "$t 3 nodes, runs of pages${i:+ under $i}" "stream OK nodes=3 mb=24" \
      env ${i:+DSM_IMPAIR=$i} "$B/dsmrun" -n 3 --stats --transport $t --set cache_pages=2048 "$B/stream" 24
    if [ $t = rdma-ud ] && ! grep "impair: dropped" "$log" | grep -q "[1-9]"; then
      echo "FAIL $t: no datagram dropped by DSM_IMPAIR"; grep "impair" "$log"; fails=$((fails + 1))
    fi
    check "$t 3 nodes, strided walk${i:+ under $i}" "stream OK nodes=3 mb=24 stride=16" \
      env ${i:+DSM_IMPAIR=$i} "$B/dsmrun" -n 3 --transport $t "$B/stream" 24 16
    check "$t 3 nodes, walks down${i:+ under $i}" "stream OK nodes=3 mb=24 stride=1 down" \
      env ${i:+DSM_IMPAIR=$i} "$B/dsmrun" -n 3 --transport $t --set cache_pages=2048 "$B/stream" 24 1 1 --down
  done
  out=$(DSM_IMPAIR=$imp "$B/dsmrun" -n 2 --transport rdma-rc "$B/pi" 100 2>&1); rc=$?
  if [ $rc -eq 2 ] && echo "$out" | grep -q "comm_type = rdma-rc sends no datagrams of ours"; then
    echo "ok   DSM_IMPAIR refused on rdma-rc: $out"
  else
    echo "FAIL DSM_IMPAIR on rdma-rc (rc=$rc): $out"; fails=$((fails + 1))
  fi
  conf=$(ls -t "$B"/deps/conformance-* 2>/dev/null | grep -v '\.d$' | head -1)
  if [ -n "$conf" ]; then
    check "conformance suite (rdma-rc, rdma-ud)" "test result: ok" \
      env DSM_TEST_RDMA=only "$conf" --test-threads 1
  else
    echo "FAIL conformance suite: no test binary under $B/deps"; fails=$((fails + 1))
  fi
  # kill -9 of node 1 in the middle of a job: dsmrun ends non-zero, naming node 1, in time.
  for t in rdma-rc rdma-ud; do
    start=$(date +%s)
    timeout 60 "$B/dsmrun" -n 2 --transport $t "$B/probe" sleep 60 >"$log" 2>&1 &
    runner=$!
    running
    start=$(date +%s)
    victim=$(newest "$B/probe sleep")
    [ -n "$victim" ] && kill -9 "$victim"
    wait $runner; rc=$?
    took=$(( $(date +%s) - start ))
    if [ $rc -ne 0 ] && grep -q "node 1 .*killed" "$log" && [ $took -le 10 ]; then
      echo "ok   $t kill -9 of node 1 detected (rc=$rc, ${took}s): $(grep 'node 1 .*killed' "$log" | head -1)"
    else
      echo "FAIL $t kill -9 of node 1 (rc=$rc, ${took}s)"; sed 's/^/     | /' "$log" | tail -20
      fails=$((fails + 1))
    fi
  done
  # SIGSTOP of node 1: its NIC still acknowledges RC traffic, so only the control mesh's
  # heartbeats can tell; with peer_timeout_ms=2000 the job must end naming it within seconds.
  for t in rdma-rc rdma-ud; do
    start=$(date +%s)
    timeout 60 "$B/dsmrun" -n 2 --transport $t --set peer_timeout_ms=2000 "$B/probe" sleep 60 >"$log" 2>&1 &
    runner=$!
    running
    start=$(date +%s)
    victim=$(newest "$B/probe sleep")
    [ -n "$victim" ] && kill -STOP "$victim"
    wait $runner; rc=$?
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    took=$(( $(date +%s) - start ))
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "lost node 1" "$log" && [ $took -le 10 ]; then
      echo "ok   $t SIGSTOP of node 1 detected (rc=$rc, ${took}s): $(grep 'lost node 1' "$log" | head -1)"
    else
      echo "FAIL $t SIGSTOP of node 1 (rc=$rc, ${took}s)"; sed 's/^/     | /' "$log" | tail -20
      fails=$((fails + 1))
    fi
  done
  ;;
pair)
  job=$2
  # Ranks from the VM index (as srun would give them), rendezvous through a file in the shared
  # folder, each node's control address on its cable interface.
  for t in rdma-rc rdma-ud; do
    for os in on off; do
      [ $t = rdma-ud ] && [ $os = off ] && continue
      # Only node 0 prints the result line; every node exits non-zero on a wrong result.
      want=""; [ "$RDMA_VM_INDEX" = 0 ] && want=OK
      for app in "matmul 192 f64" "sor 128 10" "lu 128 16"; do
        name=${app%% *}
        # A rendezvous file per run: rank 1 must never read the one of the run before.
        export SLURM_PROCID=$RDMA_VM_INDEX SLURM_NTASKS=2 DSM_BIND=$RDMA_VM_IP \
          DSM_COMM_TYPE=$t DSM_ONE_SIDED_READS=$os DSM_RENDEZVOUS_FILE=.dsm-rdma-pair-$job-$t-$os-$name
        # shellcheck disable=SC2086
        label="$t one-sided=$os"; [ $t = rdma-ud ] && label=$t
        check "$label pair $name" "$want" "$B/$name" ${app#* }
        [ "$RDMA_VM_INDEX" = 0 ] && rm -f "$DSM_RENDEZVOUS_FILE"
      done
    done
  done
  ;;
*)
  echo "usage: in-vm.sh one | pair JOBID" >&2; exit 2;;
esac
rm -f "$log"
[ $fails -eq 0 ] && echo "all RDMA checks passed ($mode)" || echo "$fails RDMA check(s) failed ($mode)"
[ $fails -eq 0 ]
