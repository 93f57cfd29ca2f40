#!/usr/bin/env bash
# netns-cluster.sh - N "hosts" on this machine as Linux network namespaces on a
# bridge, for the multi-host tests (tests/integration/test_netns_*.sh) and for
# trying dtrain across hosts by hand.  Needs root.
#
#   DTN_TAG=t1 scripts/netns-cluster.sh up N [IFACES]   hosts 1..N (IFACES: 1 or 2 interfaces each)
#   DTN_TAG=t1 scripts/netns-cluster.sh down            removes all it made (idempotent)
#   DTN_TAG=t1 scripts/netns-cluster.sh exec I CMD...   runs CMD on host I
#   DTN_TAG=t1 scripts/netns-cluster.sh addr I [K]      host I's address on interface K (default 1)
#   DTN_TAG=t1 scripts/netns-cluster.sh cut I [both|in|out]   partitions host I:
#        both  its link is set down (no carrier: nothing in or out)
#        out   what host I sends to the others is dropped (blackhole routes on host I)
#        in    what the others send to host I is dropped (blackhole routes on every other host)
#   DTN_TAG=t1 scripts/netns-cluster.sh heal I          undoes cut (every direction)
#   DTN_TAG=t1 scripts/netns-cluster.sh slow I RATE     tc tbf at RATE (e.g. 4mbit) both ways on host I's link
#   DTN_TAG=t1 scripts/netns-cluster.sh fast I          removes slow
#   DTN_TAG=t1 scripts/netns-cluster.sh pids [I]        the processes running in host I, or in any
#   DTN_TAG=t1 scripts/netns-cluster.sh rsh ADDR CMD... runs the shell command CMD on the host with
#        address ADDR, as `ssh ADDR CMD` would: Open MPI's --mca plm_rsh_agent for mpirun --host
#   DTN_TAG=t1 scripts/netns-cluster.sh name I NAME...  NAMEs resolve to host I's address on every
#        host from now on (each host's /etc/hosts, as cluster DNS learns a pod's name)
#
# What it makes, all named after DTN_TAG (letters and digits, at most 6; the
# default is printed by `up`), so clusters of several tests cannot clash:
#   namespaces   dtn-TAG-I                 host I, loopback up
#   bridges      dtbTAG-K                  interface K's network, no address here (only the
#                                          hosts are ever addressed)
#   veth pairs   dvTAG-I-K (here, on the bridge) <-> ethK-1 in host I (eth0, eth1)
#   addresses    10.(200+K).S.I/24 on ethK-1, S from the tag (1..250)
#   /etc/netns/dtn-TAG-I/hosts             host I's /etc/hosts (`ip netns exec` mounts it there):
#                                          localhost, then what `name` adds
# The kernel here has no netem: slow links are tbf, partitions are links set
# down or blackhole routes.  Node rank r of a job runs on host r+1, so node 0
# (the coordinator) is 10.201.S.1.
#
# Exit status: 0; 2 for a usage error; 77 when network namespaces cannot be
# made here (not root, or the kernel refuses them): the message says which,
# and the tests fail with it.
set -uo pipefail

TAG=${DTN_TAG:-$(printf 'p%d' $(($$ % 100000)))}
case $TAG in *[!a-zA-Z0-9]* | "") echo "netns-cluster: DTN_TAG '$TAG' must be letters and digits" >&2; exit 2 ;; esac
[ ${#TAG} -le 6 ] || { echo "netns-cluster: DTN_TAG '$TAG' is longer than 6 characters (interface names)" >&2; exit 2; }
SUB=$(( $(printf '%s' "$TAG" | cksum | cut -d' ' -f1) % 250 + 1 ))

ns() { echo "dtn-$TAG-$1"; }
br() { echo "dtb$TAG-$1"; }
veth() { echo "dv$TAG-$1-$2"; }
addr() { echo "10.$((200 + ${2:-1})).$SUB.$1"; }
hosts() { ip netns list 2>/dev/null | sed -n "s/^dtn-$TAG-\([0-9]*\).*/\1/p" | sort -n; }
ifaces() { local k=1; while ip link show "$(br "$k")" >/dev/null 2>&1; do echo "$k"; k=$((k + 1)); done; }

usage() {
  sed -n "5,21p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Whether namespaces can be made here at all: 77 with the reason if not.
probe() {
  if [ "$(id -u)" != 0 ]; then
    echo "netns-cluster: needs root to make network namespaces (running as uid $(id -u))" >&2; exit 77
  fi
  command -v ip >/dev/null || { echo "netns-cluster: no 'ip' command (iproute2)" >&2; exit 77; }
  local err p="dtn-probe-$$"
  if ! err=$(ip netns add "$p" 2>&1); then
    echo "netns-cluster: the kernel refuses network namespaces: $err" >&2; exit 77
  fi
  if ! err=$(ip link add "dvp$$" type veth peer name eth0 netns "$p" 2>&1); then
    ip netns del "$p" 2>/dev/null
    echo "netns-cluster: the kernel refuses veth pairs into a namespace: $err" >&2; exit 77
  fi
  ip link del "dvp$$" 2>/dev/null
  ip netns del "$p"
}

up() {
  local n=$1 k_max=${2:-1} i k
  case $n in '' | *[!0-9]*) usage ;; esac
  [ "$n" -ge 1 ] && [ "$n" -le 250 ] || { echo "netns-cluster: 1..250 hosts" >&2; exit 2; }
  [ "$k_max" = 1 ] || [ "$k_max" = 2 ] || { echo "netns-cluster: 1 or 2 interfaces per host" >&2; exit 2; }
  probe
  down >/dev/null 2>&1
  for k in $(seq "$k_max"); do
    ip link add "$(br "$k")" type bridge || { down; exit 1; }
    ip link set "$(br "$k")" up
  done
  for i in $(seq "$n"); do
    ip netns add "$(ns "$i")" || { down; exit 1; }
    ip -n "$(ns "$i")" link set lo up
    mkdir -p "/etc/netns/$(ns "$i")" && printf '127.0.0.1 localhost\n' >"/etc/netns/$(ns "$i")/hosts"
    for k in $(seq "$k_max"); do
      ip link add "$(veth "$i" "$k")" type veth peer name "eth$((k - 1))" netns "$(ns "$i")" || { down; exit 1; }
      ip link set "$(veth "$i" "$k")" master "$(br "$k")" up
      ip -n "$(ns "$i")" addr add "$(addr "$i" "$k")/24" dev "eth$((k - 1))"
      ip -n "$(ns "$i")" link set "eth$((k - 1))" up
    done
  done
  echo "DTN_TAG=$TAG hosts=$n interfaces=$k_max net=$(addr 0 1 | sed 's/\.0$//').0/24"
}

# Kills what runs in the hosts, then removes them, the bridges and the veths.
down() {
  local i k p
  for i in $(hosts); do
    p=$(ip netns pids "$(ns "$i")" 2>/dev/null)
    [ -n "$p" ] && kill -9 $p 2>/dev/null
  done
  for i in $(hosts); do
    ip netns del "$(ns "$i")" 2>/dev/null
  done
  rm -rf /etc/netns/dtn-"$TAG"-[0-9]* 2>/dev/null
  for k in 1 2; do
    ip link del "$(br "$k")" 2>/dev/null
  done
  # A veth whose namespace end is gone is gone too; one left by a failed `up`:
  for p in $(ip -o link show 2>/dev/null | sed -n "s/^[0-9]*: \(dv$TAG-[0-9]*-[0-9]\)[@:].*/\1/p"); do
    ip link del "$p" 2>/dev/null
  done
  return 0
}

host_ok() {
  case ${1:-} in '' | *[!0-9]*) usage ;; esac
  ip netns list | grep -q "^$(ns "$1")\( \|$\)" || { echo "netns-cluster: no host $1 in cluster $TAG" >&2; exit 2; }
}

# Blackhole routes in host FROM to host TO's addresses (add or del).
blackhole() {
  local op=$1 from=$2 to=$3 k
  for k in $(ifaces); do
    ip -n "$(ns "$from")" route "$op" blackhole "$(addr "$to" "$k")/32" 2>/dev/null
  done
}

cut() {
  local i=$1 how=${2:-both} j k
  host_ok "$i"
  case $how in
    both) for k in $(ifaces); do ip link set "$(veth "$i" "$k")" down; done ;;
    out) for j in $(hosts); do [ "$j" != "$i" ] && blackhole add "$i" "$j"; done ;;
    in) for j in $(hosts); do [ "$j" != "$i" ] && blackhole add "$j" "$i"; done ;;
    *) usage ;;
  esac
  return 0
}

heal() {
  local i=$1 j k
  host_ok "$i"
  for k in $(ifaces); do ip link set "$(veth "$i" "$k")" up; done
  for j in $(hosts); do
    [ "$j" != "$i" ] || continue
    blackhole del "$i" "$j"
    blackhole del "$j" "$i"
  done
  return 0
}

# tbf on both ends of host I's first link: egress of eth0 (what it sends) and
# of the bridge's end (what it receives).
slow() {
  local i=$1 rate=$2
  host_ok "$i"
  ip netns exec "$(ns "$i")" tc qdisc replace dev eth0 root tbf rate "$rate" burst 32kbit latency 400ms &&
    tc qdisc replace dev "$(veth "$i" 1)" root tbf rate "$rate" burst 32kbit latency 400ms
}

fast() {
  host_ok "$1"
  ip netns exec "$(ns "$1")" tc qdisc del dev eth0 root 2>/dev/null
  tc qdisc del dev "$(veth "$1" 1)" root 2>/dev/null
  return 0
}

pids() {
  local i
  [ -z "${1:-}" ] || host_ok "$1"
  for i in ${1:-$(hosts)}; do ip netns pids "$(ns "$i")" 2>/dev/null; done
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) up "${1:-}" "${2:-1}" ;;
  down) down ;;
  exec)
    host_ok "${1:-}"
    i=$1; shift
    [ $# -gt 0 ] || usage
    exec ip netns exec "$(ns "$i")" "$@"
    ;;
  addr) addr "${1:?host}" "${2:-1}" ;;
  cut) cut "${1:-}" "${2:-both}" ;;
  heal) heal "${1:-}" ;;
  slow) slow "${1:-}" "${2:?rate, e.g. 4mbit}" ;;
  fast) fast "${1:-}" ;;
  pids) pids "${1:-}" ;;
  name)
    host_ok "${1:-}"
    i=$1; shift
    [ $# -gt 0 ] || usage
    # appended in place: a running host's bind-mounted /etc/hosts sees it
    for j in $(hosts); do echo "$(addr "$i") $*" >>"/etc/netns/$(ns "$j")/hosts"; done
    ;;
  rsh)
    a=${1:-}; shift || usage
    for i in $(hosts); do
      for k in 1 2; do # (the bridges are not visible from inside a host)
        [ "$(addr "$i" "$k")" = "$a" ] && exec ip netns exec "$(ns "$i")" sh -c "$*"
      done
    done
    echo "netns-cluster: no host of cluster $TAG has the address '$a'" >&2
    exit 255
    ;;
  *) usage ;;
esac
