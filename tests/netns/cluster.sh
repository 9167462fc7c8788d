#!/usr/bin/env bash
# A cluster of "hosts" made of network namespaces on this machine, each running sshd, joined by
# a bridge in the root namespace. The addresses exist only inside the namespaces (and the
# bridge's in the root one), so no traffic leaves the machine.
#
#   cluster.sh up   ID HOSTS DIR   create hosts 10.213.ID.11 .. 10.213.ID.(10+HOSTS); keys in DIR
#   cluster.sh down ID HOSTS DIR   remove them
#
# After `up`, DIR/ssh is the ssh command to reach the hosts (for DSM_SSH).
set -euo pipefail
cmd=$1 id=$2 hosts=$3 dir=$4
# ID is the third byte of the addresses, HOSTS the fourth from 11.
if ! [[ $id =~ ^[0-9]+$ ]] || [ "$id" -lt 1 ] || [ "$id" -gt 254 ]; then
    echo "cluster.sh: ID $id: allowed 1 to 254 (the third byte of 10.213.ID.x)" >&2
    exit 2
fi
if ! [[ $hosts =~ ^[0-9]+$ ]] || [ "$hosts" -lt 1 ] || [ "$hosts" -gt 240 ]; then
    echo "cluster.sh: HOSTS $hosts: allowed 1 to 240 (addresses 10.213.ID.11 up to .250)" >&2
    exit 2
fi
br="dsmbr$id"
net="10.213.$id"

down() {
    for h in $(seq 1 "$hosts"); do
        if [ -f "$dir/sshd-$h.pid" ]; then kill "$(cat "$dir/sshd-$h.pid")" 2>/dev/null || true; fi
        ip netns del "dsm${id}h$h" 2>/dev/null || true
    done
    ip link del "$br" 2>/dev/null || true
}

if [ "$cmd" = down ]; then
    down
    exit 0
fi

down
mkdir -p "$dir" /run/sshd
ip link add "$br" type bridge
ip addr add "$net.1/24" dev "$br"
ip link set "$br" up
[ -f "$dir/key" ] || ssh-keygen -q -t ed25519 -N "" -f "$dir/key"
[ -f "$dir/hostkey" ] || ssh-keygen -q -t ed25519 -N "" -f "$dir/hostkey"
cp "$dir/key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
for h in $(seq 1 "$hosts"); do
    ns="dsm${id}h$h"
    ip netns add "$ns"
    ip link add "v${id}h$h" type veth peer name eth0 netns "$ns"
    ip link set "v${id}h$h" master "$br" up
    ip -n "$ns" addr add "$net.$((10 + h))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$net.1"
    cat > "$dir/sshd-$h.conf" <<CONF
ListenAddress $net.$((10 + h))
HostKey $dir/hostkey
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin yes
StrictModes no
UsePAM no
PasswordAuthentication no
PidFile $dir/sshd-$h.pid
AcceptEnv DSM_*
CONF
    ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd-$h.conf"
done
echo "ssh -i $dir/key -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=5" > "$dir/ssh"
# Wait until every sshd answers.
for h in $(seq 1 "$hosts"); do
    for _ in $(seq 1 50); do
        if $(cat "$dir/ssh") "$net.$((10 + h))" true 2>/dev/null; then break; fi
        sleep 0.1
    done
done
