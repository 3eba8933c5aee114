#!/usr/bin/env bash
# Removes the pod network an earlier local cluster left on this machine when
# it was killed rather than taken down by hack/cluster-down.sh: a machine
# restart under a running e2e, or a cluster of another checkout (another
# CLUSTER_DIR), whose cluster-down cannot see this one's containers.
#
# Why it matters: such a cluster leaves its pods' network namespaces attached
# to our bridge, each still holding a pod IP. The next cluster's IPAM starts
# empty and hands the same IPs out again, so a new pod shares its address with
# a dead one; whichever answers ARP gets the traffic, and a dead one answers
# with a reset. CI failed exactly so (on 2026-11-29): the bucket pod got 10.244.0.4,
# a namespace left from a killed run still held it, and every readiness probe
# was refused for 3 minutes.
#
# Run by cluster-up before it starts anything. It refuses to touch anything
# while a cluster's API server or etcd listens here: then the namespaces are
# that cluster's, alive, and the two clusters would collide anyway.
# Usage: hack/cluster-stale-net.sh   (needs root; nothing to do is fine)
set -euo pipefail
source "$(dirname "$0")/cluster-env.sh"

for port in 6443 2379; do
  if [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]]; then
    die "port $port is in use: another cluster runs on this machine (take it down with its own hack/cluster-down.sh, CLUSTER_DIR=... for another checkout)"
  fi
done

# A /24 pod CIDR: its addresses share the first three octets.
prefix=${POD_CIDR%.*}
for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
  ip -n "$ns" -4 -o addr show 2>/dev/null | grep -q " inet ${prefix//./\\.}\.[0-9]*/" || continue
  log "removing network namespace $ns, left by an earlier cluster ($(ip -n "$ns" -4 -o addr show | awk '$2 != "lo" {print $4}' | tr '\n' ' '))"
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  ip netns delete "$ns"
done
if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
  log "removing bridge $CNI_BRIDGE, left by an earlier cluster"
  ip link delete "$CNI_BRIDGE"
fi
