#!/usr/bin/env bash
# Checks hack/cluster-stale-net.sh against what a killed cluster leaves: a pod's
# network namespace on our bridge, holding a pod IP the next cluster hands out
# again (the CI failure of 2026-11-29, where the bucket pod got that IP and every
# probe was refused). Plants exactly that, runs the cleanup, and fails unless
# the namespace, its veth and the bridge are gone. make e2e runs it before it
# brings a cluster up, when none runs (the cleanup refuses otherwise).
# Usage: hack/cluster-stale-net-test.sh   (needs root)
set -euo pipefail
source "$(dirname "$0")/cluster-env.sh"
ns=bellows-stale-net-test
host_veth=bstale0
fail() { echo "cluster-stale-net-test: FAIL: $*" >&2; exit 1; }

ip netns delete "$ns" 2>/dev/null || true
ip link delete "$host_veth" 2>/dev/null || true
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 || ip link add "$CNI_BRIDGE" type bridge
ip link set "$CNI_BRIDGE" up
ip netns add "$ns"
ip link add "$host_veth" type veth peer name eth0 netns "$ns"
ip link set "$host_veth" master "$CNI_BRIDGE" up
ip -n "$ns" addr add "${POD_CIDR%.*}.4/24" dev eth0
ip -n "$ns" link set eth0 up

"$root/hack/cluster-stale-net.sh"

ip netns list | awk '{print $1}' | grep -qx "$ns" && fail "the stale namespace $ns is still there"
ip link show "$host_veth" >/dev/null 2>&1 && fail "its veth $host_veth is still there"
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && fail "the bridge $CNI_BRIDGE is still there"
echo "cluster-stale-net-test: ok: a killed cluster's namespace, veth and bridge were removed" >&2
