#!/usr/bin/env bash
# A lossy, rate-limited, delayed network on one host: N+1 network namespaces
# (node 0 = the psd, nodes 1..N = workers) on one bridge, for benchmarks of
# the data plane against kernel TCP (docs/ltp.md, bench/incast.sh).
#
#   testbed.sh up N                     build it (needs root)
#   testbed.sh shape RATE RTT_MS LOSS_PCT
#                                       e.g. shape 100mbit 20 1: every link
#                                       RATE each way (tbf), RTT_MS between
#                                       node 0 and any worker (NFQUEUE delay
#                                       on node 0's input), LOSS_PCT random
#                                       drops on every node's input (so each
#                                       worker<->psd path loses LOSS_PCT each way)
#   testbed.sh rate I RATE              node I's link alone: RATE each way
#                                       (hosts with different access links)
#   testbed.sh delay_all ONE_WAY_MS     every node delays what it receives by
#                                       ONE_WAY_MS (RTT 2 x that between any
#                                       two nodes; replaces shape's delay)
#   testbed.sh check                    user-level ping RTT, drop counters
#   testbed.sh drops                    per node, what each direction's rate
#                                       limiter sent and dropped (packets)
#                                       since the node's rate was last set
#   testbed.sh exec I CMD...            run CMD in node I
#   testbed.sh ip I                     node I's address
#   testbed.sh down                     remove everything (idempotent)
#   testbed.sh run N RATE RTT LOSS -- CMD...
#                                       up + shape, CMD, then down, even when
#                                       CMD fails or is interrupted
#
# Addresses 198.18.0.(I+1)/24 (RFC 2544 benchmarking range) exist only inside
# the namespaces; the host's own network is not touched. The kernel has no
# netem: rates use tbf, loss nftables `numgen random`, delay tools/nfqdelay
# (FIFO, no jitter; SCHED_FIFO where allowed) behind an iptables NFQUEUE rule
# (no nft_queue here). Offloads are off on every veth so the shaper and the
# filters see MTU-sized packets. HPS_TESTBED prefixes every name (default
# hpstb) so two testbeds can coexist.
set -euo pipefail

P="${HPS_TESTBED:-hpstb}"
STATE="/tmp/${P}.state"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NFQDELAY="${NFQDELAY:-$ROOT/bazel-bin/tools/nfqdelay}"
QUEUE=7

die() {
  echo "testbed: $*" >&2
  exit 1
}
sw() { ip netns exec "${P}-sw" "$@"; }
node() {
  local i=$1
  shift
  ip netns exec "${P}-n$i" "$@"
}
nodes() { cat "$STATE/nodes" 2>/dev/null || echo 0; }
ip_of() { echo "198.18.0.$(($1 + 1))"; }

need() {
  local missing=()
  for tool in ip tc nft iptables ethtool ping; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    die "missing ${missing[*]}: run tools/bootstrap.sh (Debian: iproute2 nftables iptables ethtool iputils-ping)"
  fi
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, tc, nft)"
}

up() {
  local n=$1
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up: 1..200 workers, got '$n'"
  need
  down >/dev/null 2>&1 || true
  mkdir -p "$STATE"
  echo "$n" >"$STATE/nodes"
  ip netns add "${P}-sw"
  sw ip link set lo up
  sw ip link add br0 type bridge
  sw ip link set br0 up
  for i in $(seq 0 "$n"); do
    ip netns add "${P}-n$i"
    ip link add "${P}v${i}a" type veth peer name "${P}v${i}b"
    ip link set "${P}v${i}a" netns "${P}-sw"
    ip link set "${P}v${i}b" netns "${P}-n$i"
    sw ip link set "${P}v${i}a" name "v$i"
    sw ip link set "v$i" master br0 up
    node "$i" ip link set "${P}v${i}b" name eth0
    node "$i" ip link set lo up
    node "$i" ip addr add "$(ip_of "$i")/24" dev eth0
    node "$i" ip link set eth0 up
    sw ethtool -K "v$i" tso off gso off gro off >/dev/null 2>&1 || true
    node "$i" ethtool -K eth0 tso off gso off gro off >/dev/null 2>&1 || true
  done
  echo "testbed: up: psd node 0 at $(ip_of 0), workers 1..$n at $(ip_of 1)..$(ip_of "$n")"
}

stop_delay() {
  local f pid
  for f in "$STATE"/nfqdelay*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  done
}

rate() {
  local i=$1 r=$2
  [ "$i" -le "$(nodes)" ] || die "rate: no node $i"
  node "$i" tc qdisc replace dev eth0 root tbf rate "$r" burst 32kb latency 20ms
  sw tc qdisc replace dev "v$i" root tbf rate "$r" burst 32kb latency 20ms
  echo "testbed: node $i: $r each way"
}

# The delay line runs at a real-time priority where the kernel allows it:
# it is the emulated network, and a release the scheduler holds back behind
# the daemons under test is jitter, and a burst, that network does not
# have. It sleeps between releases (tools/nfqdelay.cc), so it cannot take
# their CPU; the kernel's RT throttling bounds it regardless. chrt execs
# the program, so $! stays its PID.
rt=()
if chrt -f 20 true 2>/dev/null; then rt=(chrt -f 20); fi

delay_all() {
  local ms=$1 n i
  [[ "$ms" =~ ^[0-9]+$ ]] || die "delay_all: whole milliseconds, got '$ms'"
  [ -x "$NFQDELAY" ] || die "delay_all: $NFQDELAY not built (bazel build -c opt //tools:nfqdelay)"
  n=$(nodes)
  stop_delay
  for i in $(seq 0 "$n"); do
    node "$i" iptables -t mangle -F PREROUTING 2>/dev/null || true
    [ "$ms" -gt 0 ] || continue
    # Each namespace has its own queues: the same number in every node.
    node "$i" iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num $QUEUE --queue-bypass
    ip netns exec "${P}-n$i" "${rt[@]}" "$NFQDELAY" --queue=$QUEUE --delay_ms="$ms" \
      >"$STATE/nfqdelay-n$i.log" 2>&1 &
    echo $! >"$STATE/nfqdelay-n$i.pid"
  done
  sleep 0.3
  for i in $(seq 0 "$n"); do
    [ "$ms" -gt 0 ] || break
    kill -0 "$(cat "$STATE/nfqdelay-n$i.pid")" 2>/dev/null ||
      die "nfqdelay in node $i failed: $(cat "$STATE/nfqdelay-n$i.log")"
  done
  echo "testbed: every node delays its input by $ms ms (RTT $((2 * ms)) ms)"
}

shape() {
  local rate=$1 rtt=$2 loss=$3
  local n
  n=$(nodes)
  [ "$n" -ge 1 ] || die "shape: no testbed (run up first)"
  [[ "$rtt" =~ ^[0-9]+$ ]] || die "shape: RTT_MS must be whole milliseconds, got '$rtt'"
  # Loss in units of 0.01%: numgen random mod 10000 < N.
  local per10k
  per10k=$(awk -v l="$loss" 'BEGIN { if (l < 0 || l > 100) exit 1; printf "%d", l * 100 + 0.5 }') ||
    die "shape: LOSS_PCT must be 0..100, got '$loss'"
  for i in $(seq 0 "$n"); do
    # Both directions of every link: node -> bridge on eth0, bridge -> node on v$i.
    node "$i" tc qdisc replace dev eth0 root tbf rate "$rate" burst 32kb latency 20ms
    sw tc qdisc replace dev "v$i" root tbf rate "$rate" burst 32kb latency 20ms
    node "$i" nft delete table inet hps_loss 2>/dev/null || true
    if [ "$per10k" -gt 0 ]; then
      node "$i" nft -f - <<EOF
table inet hps_loss {
  chain in {
    type filter hook prerouting priority -300; policy accept;
    iifname "eth0" numgen random mod 10000 < $per10k counter drop
  }
}
EOF
    fi
  done
  stop_delay
  # This kernel has NFQUEUE only as the xtables target (no nft_queue):
  # iptables (nft backend) installs it. The delay sits on node 0's INPUT
  # path: a packet held on a sender's output still counts against its TCP
  # small-queue budget (~1 ms of pacing), which would cap a TCP sender at
  # a few Mbit/s, an artefact no real link has.
  node 0 iptables -t mangle -F PREROUTING 2>/dev/null || true
  if [ "$rtt" -gt 0 ]; then
    [ -x "$NFQDELAY" ] || die "shape: $NFQDELAY not built (bazel build -c opt //tools:nfqdelay)"
    node 0 iptables -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num $QUEUE --queue-bypass
    # Not through node(): $! must be the program itself (ip netns exec
    # execs it), so that stop_delay's kill reaches it.
    ip netns exec "${P}-n0" "${rt[@]}" "$NFQDELAY" --queue=$QUEUE --delay_ms="$rtt" \
      >"$STATE/nfqdelay.log" 2>&1 &
    echo $! >"$STATE/nfqdelay.pid"
    sleep 0.3
    kill -0 "$(cat "$STATE/nfqdelay.pid")" 2>/dev/null || die "nfqdelay failed: $(cat "$STATE/nfqdelay.log")"
  fi
  echo "testbed: shaped: $rate per link each way, RTT ${rtt} ms, loss ${loss}% each way"
}

check() {
  local n
  n=$(nodes)
  [ "$n" -ge 1 ] || die "check: no testbed"
  # -U: user-to-user latency (plain ping stamps before the NFQUEUE delay).
  local out
  out=$(node 1 ping -U -q -c 10 -i 0.05 -W 2 "$(ip_of 0)" 2>&1 || true)
  echo "$out" | grep -E "packets transmitted|rtt" | sed 's/^/testbed: ping 1->0: /'
  node 0 nft list table inet hps_loss 2>/dev/null | grep -o "counter packets [0-9]*" |
    sed 's/^/testbed: node 0 drops: /' || true
}

# One line a node: "node I up SENT DROPPED down SENT DROPPED", up its
# eth0 (node -> bridge), down the bridge's v$I (bridge -> node). `rate`
# and `shape` replace the qdiscs, which starts their counters again.
drops() {
  local n i
  n=$(nodes)
  [ "$n" -ge 1 ] || die "drops: no testbed"
  qstat() { awk '/Sent/ { s = $4 } /dropped/ { gsub(",", "", $7); d = $7 } END { printf "%d %d", s, d }'; }
  for i in $(seq 0 "$n"); do
    echo "node $i up $(node "$i" tc -s qdisc show dev eth0 | qstat)" \
      "down $(sw tc -s qdisc show dev "v$i" | qstat)"
  done
}

down() {
  stop_delay
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}-(sw|n[0-9]+)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$STATE"
  echo "testbed: down"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  up) up "${1:?up N}" ;;
  shape) shape "${1:?RATE}" "${2:?RTT_MS}" "${3:?LOSS_PCT}" ;;
  rate) rate "${1:?rate I RATE}" "${2:?rate I RATE}" ;;
  delay_all) delay_all "${1:?delay_all ONE_WAY_MS}" ;;
  check) check ;;
  drops) drops ;;
  exec)
    i="${1:?exec I CMD}"
    shift
    node "$i" "$@"
    ;;
  ip) ip_of "${1:?ip I}" ;;
  down) down ;;
  run)
    n="${1:?}" rate="${2:?}" rtt="${3:?}" loss="${4:?}"
    shift 4
    [ "${1:-}" = "--" ] && shift
    trap 'down' EXIT INT TERM
    up "$n"
    shape "$rate" "$rtt" "$loss"
    check
    "$@"
    ;;
  *)
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
