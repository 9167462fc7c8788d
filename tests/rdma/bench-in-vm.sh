#!/bin/sh
# Runs inside the Soft-RoCE VM: remote fault latency and matmul times on 2 nodes for every
# transport, all in one VM boot so the figures compare (they are software RDMA under QEMU: they
# show ratios between transports on this setup, not hardware speed). Started by scripts/bench-rdma.
B=${B:-target/rdma/release}
N=${MATMUL_N:-512}
REPS=${REPS:-3}
out=$(mktemp)
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }  # busybox date has no %N
printf "%-28s %12s %12s %12s %12s %12s\n" transport "read fault" "write fault" "lock" "matmul job" "matmul time"
for spec in "udp" "tcp" "rdma-rc one_sided_reads=on" "rdma-rc one_sided_reads=off" "rdma-ud"; do
  t=${spec%% *}; set -- ; case $spec in *=*) set -- --set "${spec#* }";; esac
  "$B/dsmrun" -n 2 --transport "$t" --set prefetch=off "$@" "$B/faultlat" 400 >"$out" 2>&1
  rf=$(grep -i "remote read fault" "$out" | head -1 | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {print $i; exit}}')
  wf=$(grep -i "remote write fault" "$out" | head -1 | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {print $i; exit}}')
  lk=$(grep "lock acquire" "$out" | head -1 | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) {print $i; exit}}')
  best=""
  app=""
  i=0
  while [ $i -lt "$REPS" ]; do
    s=$(now_ms)
    "$B/dsmrun" -n 2 --transport "$t" "$@" "$B/matmul" "$N" f64 >"$out" 2>&1 || { echo "matmul failed on $spec"; cat "$out"; }
    e=$(now_ms)
    ms=$((e - s))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then
      best=$ms
      app=$(grep -o "time=[0-9.]*s" "$out" | head -1 | cut -d= -f2)
    fi
    i=$((i + 1))
  done
  printf "%-28s %9s us %9s us %9s us %10s s %12s\n" "$spec" "${rf:-?}" "${wf:-?}" "${lk:-?}" \
    "$(awk "BEGIN{printf \"%.2f\", $best/1000}")" "$app"
done
echo "(fault and lock: medians from faultlat with prefetch off; matmul $N f64 on 2 nodes: whole job from dsmrun start to exit, best of $REPS, and the time matmul reports for its multiply)"
rm -f "$out"
