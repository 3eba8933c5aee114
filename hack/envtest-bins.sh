#!/usr/bin/env bash
# Builds the control-plane binaries the envtest suites run against, from the Go
# module proxy (setup-envtest cannot download them here):
#   bin/k8s/kube-apiserver, bin/k8s/kube-controller-manager  (k8s.io/kubernetes $K8S_VERSION)
#   bin/k8s/etcd                                             (go.etcd.io/etcd/server/v3 $ETCD_VERSION)
#   bin/k8s/crd/monitoring.coreos.com_servicemonitors.yaml   (prometheus-operator $PROMOP_VERSION example CRDs)
# Skips the build when bin/k8s/.version already records these versions and the
# binaries exist. Prints the directory (use it as KUBEBUILDER_ASSETS).
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
PROMOP_VERSION=${PROMOP_VERSION:-v0.85.0}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
stamp="$out/.version"
want="kubernetes=$K8S_VERSION etcd=$ETCD_VERSION"
bins=(kube-apiserver kube-controller-manager etcd)

# The ServiceMonitor CRD, from the prometheus-operator module's example CRDs.
sm_crd="$out/crd/monitoring.coreos.com_servicemonitors.yaml"
if [[ ! -f "$sm_crd" ]]; then
  mkdir -p "$out/crd"
  dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMOP_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$sm_crd"
  chmod u+w "$sm_crd"
fi

have=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || have=0; done
if [[ $have == 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$out"; exit 0
fi
mkdir -p "$out"
export GOFLAGS=-mod=mod GOWORK=off

# --- kube-apiserver and kube-controller-manager -----------------------------
k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
staging_version="v0.${K8S_VERSION#v1.}"
work="$root/bin/k8s-build/kubernetes-$K8S_VERSION"
mkdir -p "$work"
modfile=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[[ -f "$modfile" ]] || { echo "envtest-bins: cannot download k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
{
  echo "module bellows.dev/envtest-bins"
  echo
  echo "go $(sed -n 's/^go \(.*\)/\1/p' "$modfile")"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  # every staging module of k8s.io/kubernetes, pinned to the matching release
  grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$modfile" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} > "$work/go.mod"
cat > "$work/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
EOF
ldflags="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
(
  cd "$work"
  echo "envtest-bins: resolving k8s.io/kubernetes $K8S_VERSION" >&2
  go mod tidy -e >&2
  for cmd in kube-apiserver kube-controller-manager; do
    echo "envtest-bins: building $cmd $K8S_VERSION" >&2
    go build -tags tools -trimpath -ldflags "$ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd" >&2
  done
)

# --- etcd --------------------------------------------------------------------
ework="$root/bin/k8s-build/etcd-$ETCD_VERSION"
mkdir -p "$ework"
cat > "$ework/go.mod" <<EOF
module bellows.dev/envtest-etcd

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
cat > "$ework/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
(
  cd "$ework"
  echo "envtest-bins: building etcd $ETCD_VERSION" >&2
  go mod tidy >&2
  go build -trimpath -o "$out/etcd" . >&2
)

echo "$want" > "$stamp"
echo "$out"
