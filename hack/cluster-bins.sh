#!/usr/bin/env bash
# Builds what the local single-node cluster (hack/cluster-up.sh) needs on top of
# the envtest binaries (hack/envtest-bins.sh: kube-apiserver,
# kube-controller-manager, etcd):
#   bin/k8s/{kube-scheduler,kubelet,kube-proxy,kubectl}   (k8s.io/kubernetes $K8S_VERSION)
# from the Go module proxy, with the same replace recipe. It uses its own copy of
# the envtest module (bin/k8s-build/kubernetes-$K8S_VERSION-cluster) so that
# `make test` never resolves or builds these; the Go build cache is shared.
# Skips the build when bin/k8s/.cluster-version records $K8S_VERSION and the
# binaries exist. Prints the directory.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.36.3}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bin/k8s"
"$root/hack/envtest-bins.sh" >/dev/null
stamp="$out/.cluster-version"
want="kubernetes=$K8S_VERSION"
bins=(kube-scheduler kubelet kube-proxy kubectl)
have=1
for b in "${bins[@]}"; do [[ -x "$out/$b" ]] || have=0; done
if [[ $have == 1 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$out"; exit 0
fi
export GOFLAGS=-mod=mod GOWORK=off
k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
src="$root/bin/k8s-build/kubernetes-$K8S_VERSION"
work="$src-cluster"
mkdir -p "$work"
cp "$src/go.mod" "$src/go.sum" "$work/"
sed -i 's|^module .*|module bellows.dev/cluster-bins|' "$work/go.mod"
{
  echo '//go:build tools'
  echo
  echo 'package tools'
  echo
  echo 'import ('
  for b in "${bins[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
  echo ')'
} > "$work/tools.go"
ldflags="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
(
  cd "$work"
  echo "cluster-bins: resolving k8s.io/kubernetes $K8S_VERSION" >&2
  go mod tidy -e >&2
  for cmd in "${bins[@]}"; do
    echo "cluster-bins: building $cmd $K8S_VERSION" >&2
    go build -tags tools -trimpath -ldflags "$ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd" >&2
  done
)
echo "$want" > "$stamp"
echo "$out"
