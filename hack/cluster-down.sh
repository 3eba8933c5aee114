#!/usr/bin/env bash
# Stops the local cluster that hack/cluster-up.sh started and removes what it
# and its pods left on the machine, so that the next cluster-up starts clean:
#   - the pods (deleted through the API while kubelet still runs, so that
#     containerd tears down their network), then any container still running
#   - exactly the processes recorded in $CLUSTER_DIR/pids (TERM, then KILL)
#   - mounts under $CLUSTER_DIR, the kubepods cgroups, the CNI bridge and its
#     iptables rules, the chains kube-proxy and kubelet created
#     (kube-proxy --cleanup; KUBE-FIREWALL, KUBE-KUBELET-CANARY,
#     KUBE-IPTABLES-HINT for IPv4 and IPv6)
#   - net.ipv4.ip_forward back to its value before cluster-up
# Logs are kept in $CLUSTER_DIR.logs. Idempotent: nothing to do is fine.
set -uo pipefail
source "$(dirname "$0")/cluster-env.sh"
D=$CLUSTER_DIR
if [[ ! -d $D ]]; then log "no cluster in $D"; exit 0; fi
k() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" --request-timeout=10s "$@"; }

stop() { # stop NAME: TERM, wait up to 20 s, KILL
  local name=$1 pid i
  pid_alive "$name" || { rm -f "$D/pids/$name.pid"; return 0; }
  pid=$(cat "$D/pids/$name.pid")
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 100; i++)); do [[ -d /proc/$pid ]] || break; sleep 0.2; done
  [[ -d /proc/$pid ]] && { log "$name did not stop: KILL"; kill -KILL "$pid" 2>/dev/null; sleep 0.5; }
  rm -f "$D/pids/$name.pid"
}

# 1. Pods: stop the controllers that would recreate them, delete them all,
#    and let kubelet stop their sandboxes (which runs CNI DEL).
if pid_alive kubelet && pid_alive kube-apiserver && k get --raw /readyz >/dev/null 2>&1; then
  stop kube-controller-manager
  stop kube-scheduler
  log "deleting all pods"
  k delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1
  for ((i = 0; i < 120; i++)); do
    [[ -z $(k get pods -A -o name 2>/dev/null) ]] && [[ -z $(ctr_ tasks ls -q 2>/dev/null) ]] && break
    sleep 0.5
  done
fi
for c in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done

# 2. Whatever still runs in our containerd: kill and delete it.
if pid_alive containerd; then
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
  for ((i = 0; i < 50; i++)); do [[ -z $(ctr_ tasks ls 2>/dev/null | awk 'NR>1 && $3=="RUNNING"') ]] && break; sleep 0.2; done
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    # a sandbox's network namespace, if containerd left it behind
    ns=$(ctr_ containers info "$id" 2>/dev/null | sed -n 's/.*"path": "\(\/var\/run\/netns\/cni-[^"]*\)".*/\1/p' | head -n1)
    if [[ -n $ns && -e $ns ]]; then umount "$ns" 2>/dev/null; rm -f "$ns"; fi
    ctr_ containers delete "$id" >/dev/null 2>&1
  done
fi
stop containerd
# containerd-shims of our containerd (they outlive it); matched by our socket path
for pid in $(pgrep -f "containerd-shim.*-address $CONTAINERD_SOCK" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done

# 3. Mounts under the state dir (kubelet volumes, containerd snapshots), deepest first.
awk -v d="$D/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done

# 4. iptables: kube-proxy's rules, kubelet's chains, the CNI bridge's masquerade rules.
[[ -x $K8S_BIN/kube-proxy ]] && "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1
for ipt in iptables ip6tables; do
  command -v $ipt >/dev/null || continue
  for table in filter nat mangle; do
    for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT KUBE-PROXY-CANARY; do
      $ipt -t $table -S 2>/dev/null | grep -E "^-A .* -j $chain( |$)" | sed 's/^-A/-D/' | while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null; done
      $ipt -t $table -F $chain 2>/dev/null && $ipt -t $table -X $chain 2>/dev/null
    done
  done
done
# the bridge plugin's ipMasq rules carry a comment naming our network
iptables -t nat -S POSTROUTING 2>/dev/null | grep -F "name: \\\"$CNI_NETWORK\\\"" | sed 's/^-A/-D/' | while read -r rule; do eval "iptables -t nat $rule" 2>/dev/null; done
for chain in $(iptables -t nat -S 2>/dev/null | awk '/^-N CNI-/ {print $2}'); do
  iptables -t nat -S 2>/dev/null | grep -q -- "-j $chain\b" && continue
  iptables -t nat -F "$chain" 2>/dev/null; iptables -t nat -X "$chain" 2>/dev/null
done

# 5. kubepods cgroups (cgroup v1 hierarchies and the unified one), leaves first.
for dir in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [[ -d $dir ]] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null
done

# 6. The CNI bridge and ip_forward.
ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && ip link delete "$CNI_BRIDGE"
[[ -f $D/ip_forward.orig ]] && cat "$D/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward

# 7. The state dir; its logs are kept next to it.
left=$(awk -v d="$D/" 'index($2, d) == 1' /proc/self/mounts)
if [[ -n $left ]]; then log "still mounted, keeping $D:"; echo "$left" >&2; exit 1; fi
rm -rf "$D.logs"; [[ -d $D/logs ]] && mv "$D/logs" "$D.logs"
rm -rf "$D"
log "down (logs in $D.logs)"
