#!/usr/bin/env bash
# Builds prometheus-adapter (sigs.k8s.io/prometheus-adapter, the Kubernetes
# external-metrics API over Prometheus) into bin/prometheus-adapter from the Go module
# proxy, for the e2e's HorizontalPodAutoscaler on a CompactionPool (e2e/hpa_test.go).
# `go install mod@version` does not work here (it asks the proxy for the module's
# version list, which the proxy refuses for this module), so it builds from a helper
# module that requires the pinned version. About 4 minutes the first time on 2 cores.
# Skipped when bin/prometheus-adapter records the version. Prints its path.
set -euo pipefail
VERSION=${PROMETHEUS_ADAPTER_VERSION:-v0.12.0}
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
stamp="$bin/.prometheus-adapter.version"
if [[ -x "$bin/prometheus-adapter" && -f "$stamp" && "$(cat "$stamp")" == "$VERSION" ]]; then
  echo "$bin/prometheus-adapter"; exit 0
fi
echo "building prometheus-adapter $VERSION" >&2
work="$bin/prometheus-adapter-build"
rm -rf "$work"
mkdir -p "$work"
cat > "$work/go.mod" <<MOD
module bellows.dev/prometheus-adapter-build

go 1.22
MOD
cat > "$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
GO
(
  cd "$work"
  export GOFLAGS=-mod=mod GOWORK=off
  go get "sigs.k8s.io/prometheus-adapter@$VERSION" >&2
  go build -trimpath -o "$bin/prometheus-adapter.new" sigs.k8s.io/prometheus-adapter/cmd/adapter >&2
)
mv "$bin/prometheus-adapter.new" "$bin/prometheus-adapter"
echo "$VERSION" > "$stamp"
echo "$bin/prometheus-adapter"
