#!/usr/bin/env bash
# Streams between two "hosts" (network namespaces joined by a bridge, MTU 1500), two builds
# interleaved, with a plain TCP stream between the same namespaces in each round.
#   A=/tmp/binA B=/tmp/binB docs/perf/2026-11-29-udp-between-hosts.sh [ROUNDS] [LOSS%]
# Each bin directory holds dsmrun and stream. Needs root, iproute2, openssh-server, python3
# (and nftables for a loss).
set -euo pipefail
rounds=${1:-5} loss=${2:-0}
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
bash "$here/tests/netns/cluster.sh" up 77 2 "$dir" >/dev/null
trap 'bash "$here/tests/netns/cluster.sh" down 77 2 "$dir"; rm -rf "$dir"' EXIT
printf '10.213.77.11\n10.213.77.12\n' > "$dir/hosts"
export DSM_SSH; DSM_SSH=$(cat "$dir/ssh")
if [ "$loss" != 0 ]; then
    for h in 1 2; do
        printf 'add table inet l\nadd chain inet l out { type filter hook output priority 0 ; }\nadd rule inet l out meta l4proto udp numgen random mod 100 < %s drop\n' "$loss" |
            ip netns exec dsm77h$h nft -f -
    done
fi
cat > "$dir/plain.py" <<'PY'
import socket, sys, time
if sys.argv[1] == "send":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.213.77.11", 5201)); s.listen(1)
    c, _ = s.accept(); buf = bytearray(1 << 20)
    for _ in range(1024): c.sendall(buf)
    c.close()
else:
    c = socket.create_connection(("10.213.77.11", 5201))
    mv = memoryview(bytearray(1 << 20)); total = 0; t0 = time.time()
    while (n := c.recv_into(mv)): total += n
    print(f"plain tcp mbps={total / 1e6 / (time.time() - t0):.0f}")
PY
for _ in $(seq "$rounds"); do
    ip netns exec dsm77h1 python3 "$dir/plain.py" send & sleep 0.3
    ip netns exec dsm77h2 python3 "$dir/plain.py" recv; wait
    for v in A B; do
        for t in udp tcp; do
            bin=${!v}
            printf '%s %s ' "$v" "$t"
            timeout 120 "$bin/dsmrun" --hosts "$dir/hosts" --transport "$t" "$bin/stream" 256 2>&1 |
                grep -o 'mbps=[0-9]*' || echo failed
        done
    done
done
