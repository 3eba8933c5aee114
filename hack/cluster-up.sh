#!/usr/bin/env bash
# Starts a real single-node Kubernetes v1.36.3 on this machine, as processes:
# a private containerd (+ runc, CNI bridge), etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy, with
# certificates made by openssl. Everything lives in $CLUSTER_DIR (default
# .cluster/): kubeconfig, logs/<component>.log, pids/<component>.pid.
# Waits until the node is Ready and the default ServiceAccount exists, then
# imports the images (hack/cluster-images.sh). Needs root.
# Idempotent: when the cluster already runs, it only prints the kubeconfig.
# The recipe: ../shared/local-cluster.md; hack/cluster-down.sh undoes it all.
set -euo pipefail
source "$(dirname "$0")/cluster-env.sh"
[[ $(id -u) == 0 ]] || die "cluster-up needs root (containerd, kubelet, iptables)"

running=0
for c in "${COMPONENTS[@]}"; do pid_alive "$c" && running=$((running + 1)); done
if [[ $running == "${#COMPONENTS[@]}" ]] && "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz >/dev/null 2>&1; then
  log "already up"; echo "$KUBECONFIG_ADMIN"; exit 0
fi
if [[ $running -gt 0 || -d $CLUSTER_DIR ]]; then
  log "a previous cluster is partly there: taking it down first"
  "$root/hack/cluster-down.sh"
fi

start=$SECONDS
# --- what we need: Debian packages, then the binaries ----------------------
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v openssl >/dev/null || need+=(openssl)
command -v ip >/dev/null || need+=(iproute2)
if [[ ${#need[@]} -gt 0 ]]; then
  log "installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
"$root/hack/cluster-bins.sh" >/dev/null

NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
[[ -n $NODE_IP ]] || NODE_IP=$(hostname -I | awk '{print $1}')
[[ -n $NODE_IP ]] || die "cannot find this machine's IPv4 address (set NODE_IP)"
log "node $NODE_NAME at $NODE_IP, state in $CLUSTER_DIR"

"$root/hack/cluster-stale-net.sh"

D=$CLUSTER_DIR
mkdir -p "$D"/{pki,pids,logs,etcd,containerd,cni/net.d,cni/ipam,kubelet,volumes}
cat /proc/sys/net/ipv4/ip_forward > "$D/ip_forward.orig"
echo "$NODE_NAME $NODE_IP" > "$D/node"

# --- certificates -----------------------------------------------------------
P=$D/pki
openssl_q() { openssl "$@" 2>/dev/null; }
openssl_q genrsa -out "$P/ca.key" 2048
openssl_q req -x509 -new -nodes -key "$P/ca.key" -subj "/CN=bellows-local-ca" -days 3650 -out "$P/ca.crt"
# cert NAME CN O [SANs] [usage]
cert() {
  local name=$1 cn=$2 o=$3 sans=${4:-} usage=${5:-clientAuth} subj="/CN=$2"
  [[ -n $o ]] && subj="/O=$o/CN=$cn"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } > "$P/$name.ext"
  openssl_q genrsa -out "$P/$name.key" 2048
  openssl_q req -new -key "$P/$name.key" -subj "$subj" -out "$P/$name.csr"
  openssl_q x509 -req -in "$P/$name.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 -extfile "$P/$name.ext" -out "$P/$name.crt"
}
cert apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:$SERVICE_IP,IP:$NODE_IP,IP:127.0.0.1" serverAuth
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert admin admin system:masters
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kubelet "system:node:$NODE_NAME" system:nodes
cert kubelet-serving "$NODE_NAME" "" "DNS:$NODE_NAME,IP:$NODE_IP,IP:127.0.0.1" serverAuth
cert kube-proxy system:kube-proxy ""
# The aggregation layer's client: kube-apiserver proxies to aggregated APIs (the
# e2e's prometheus-adapter serving external.metrics.k8s.io) as front-proxy-client,
# and the aggregated server trusts only that name from this CA for the user headers.
cert front-proxy-client front-proxy-client ""
openssl_q genrsa -out "$P/sa.key" 2048
openssl_q rsa -in "$P/sa.key" -pubout -out "$P/sa.pub"

# kubeconfig FILE USER CERT
kubeconfig() {
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $P/ca.crt
users:
- name: $2
  user:
    client-certificate: $P/$3.crt
    client-key: $P/$3.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}
kubeconfig "$KUBECONFIG_ADMIN" admin admin
kubeconfig "$D/controller-manager.kubeconfig" controller-manager controller-manager
kubeconfig "$D/scheduler.kubeconfig" scheduler scheduler
kubeconfig "$D/kubelet.kubeconfig" kubelet kubelet
kubeconfig "$D/kube-proxy.kubeconfig" kube-proxy kube-proxy

# start NAME BINARY ARGS...: run in its own session, log and PID under $D
start() {
  local name=$1; shift
  log "starting $name"
  setsid "$@" > "$D/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$D/pids/$name.pid"
}
# await WHAT TIMEOUT COMMAND...: poll until COMMAND succeeds
await() {
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what; last log lines:"
      for c in "${COMPONENTS[@]}"; do [[ -f $D/logs/$c.log ]] && { echo "--- $c" >&2; tail -n 15 "$D/logs/$c.log" >&2; }; done
      exit 1
    fi
    sleep 0.5
  done
}
alive() { for c in "$@"; do pid_alive "$c" || { log "$c exited; its log:"; tail -n 40 "$D/logs/$c.log" >&2; exit 1; }; done; }

# --- containerd -------------------------------------------------------------
cat > "$D/cni/net.d/10-$CNI_NETWORK.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {"type": "bridge", "bridge": "$CNI_BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$D/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
cat > "$D/containerd/config.toml" <<TOML
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[debug]
  address = "$D/containerd/debug.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
TOML
start containerd containerd --config "$D/containerd/config.toml"
await "containerd" 30 ctr_ version
alive containerd

# --- etcd and the control plane ---------------------------------------------
start etcd "$K8S_BIN/etcd" --name local --data-dir "$D/etcd" --unsafe-no-fsync \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster local=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port=6443 \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
  --requestheader-client-ca-file="$P/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
  --enable-aggregator-routing=true
await "kube-apiserver" 90 "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz
alive etcd kube-apiserver

start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$D/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$D/controller-manager.kubeconfig" --authorization-kubeconfig="$D/controller-manager.kubeconfig" \
  --controllers='*' --leader-elect=false \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --use-service-account-credentials \
  --allocate-node-cidrs --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 --service-cluster-ip-range="$SERVICE_CIDR" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --bind-address=127.0.0.1
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$D/scheduler.kubeconfig" \
  --authentication-kubeconfig="$D/scheduler.kubeconfig" --authorization-kubeconfig="$D/scheduler.kubeconfig" \
  --leader-elect=false --bind-address=127.0.0.1

# --- kubelet and kube-proxy -------------------------------------------------
cat > "$D/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1%", nodefs.available: "1%", nodefs.inodesFree: "1%", imagefs.available: "1%"}
serializeImagePulls: false
YAML
start kubelet "$K8S_BIN/kubelet" --config="$D/kubelet/config.yaml" --kubeconfig="$D/kubelet.kubeconfig" \
  --root-dir="$D/kubelet/root" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
cat > "$D/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $D/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
conntrack: {maxPerCore: 0}
nodePortAddresses: [primary]
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
YAML
start kube-proxy "$K8S_BIN/kube-proxy" --config="$D/kube-proxy.yaml"

# --- images, while the node registers ---------------------------------------
"$root/hack/cluster-images.sh" pause s3 bellows
alive "${COMPONENTS[@]}"

k() { "$K8S_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
await "node $NODE_NAME Ready" 120 k wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
await "the default ServiceAccount" 60 k get serviceaccount default -n default
alive "${COMPONENTS[@]}"
log "up in $((SECONDS - start))s; export KUBECONFIG=$KUBECONFIG_ADMIN"
echo "$KUBECONFIG_ADMIN"
