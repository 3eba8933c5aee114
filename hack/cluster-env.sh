# Sourced by hack/cluster-*.sh: where the local single-node cluster lives.
# CLUSTER_DIR holds everything it writes (certificates, kubeconfigs, etcd,
# containerd, kubelet, logs, PIDs); it is gitignored and removed by
# cluster-down (its logs are kept in $CLUSTER_DIR.logs).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER_DIR=${CLUSTER_DIR:-$root/.cluster}
K8S_BIN=${K8S_BIN:-$root/bin/k8s}
NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
CNI_BRIDGE=bellows0
CNI_NETWORK=bellows
CONTAINERD_SOCK=$CLUSTER_DIR/containerd/containerd.sock
PAUSE_IMAGE=${PAUSE_IMAGE:-bellows.test/pause:1}
KUBECONFIG_ADMIN=$CLUSTER_DIR/kubeconfig
# Every process cluster-up starts, in start order (cluster-down stops them in reverse).
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }

# pid_alive NAME: the recorded PID of NAME is running the binary we started.
pid_alive() {
  local f=$CLUSTER_DIR/pids/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(cat "$f")
  [[ -d /proc/$pid ]] || return 1
  # the PID may have been reused: its command line must name our component
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1" || return 1
}

ctr_() { ctr -a "$CONTAINERD_SOCK" -n k8s.io "$@"; }
