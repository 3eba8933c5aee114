#!/usr/bin/env bash
# `make e2e`: brings the local cluster up when it is not (hack/cluster-up.sh),
# imports freshly built bellows and S3 images, runs the end-to-end tests
# (go test -tags e2e ./e2e/...), and takes the cluster down afterwards, also
# on failure or interrupt, unless E2E_KEEP_CLUSTER=1. On failure it prints
# the tail of every component's log; the tests write their own diagnostics
# (pods, events, container logs) to $CLUSTER_DIR/logs/e2e/, and cluster-down
# keeps that directory as $CLUSTER_DIR.logs/.
set -euo pipefail
source "$(dirname "$0")/cluster-env.sh"
E2E_TIMEOUT=${E2E_TIMEOUT:-25m}
export E2E_IMAGE=${E2E_IMAGE:-bellows.test/bellows:e2e}
export E2E_UPGRADE_IMAGE=${E2E_UPGRADE_IMAGE:-bellows.test/bellows:e2e-upgrade}
export E2E_S3_IMAGE=${S3_IMAGE:-bellows.test/s3:e2e}

finish() {
  local rc=$? test_log=${test_log:-}
  stop_prometheus
  if [[ $rc != 0 && -d $CLUSTER_DIR/logs ]]; then
    echo "e2e: FAILED (exit $rc); the last lines of each component's log:" >&2
    for f in "$CLUSTER_DIR"/logs/*.log; do echo "----- $f" >&2; tail -n 30 "$f" >&2; done
  fi
  if [[ ${E2E_KEEP_CLUSTER:-0} == 1 ]]; then
    echo "e2e: E2E_KEEP_CLUSTER=1: the cluster keeps running (KUBECONFIG=$KUBECONFIG_ADMIN; make cluster-down)" >&2
  else
    "$root/hack/cluster-down.sh" || rc=1
  fi
  [[ $rc != 0 && -d $CLUSTER_DIR.logs ]] && echo "e2e: logs kept in $CLUSTER_DIR.logs" >&2
  # The failed scenarios' diagnostics (e2e/framework_test.go dump): the pods'
  # container logs, a crashed container's last run first, and the warnings among
  # the events. CI keeps only this output, not the files.
  if [[ $rc != 0 && -d $CLUSTER_DIR.logs/e2e ]]; then
    for d in "$CLUSTER_DIR".logs/e2e/*/; do
      [[ -d $d ]] || continue
      echo "e2e: diagnostics of $(basename "$d"):" >&2
      [[ -f $d/events.txt ]] && grep -E 'Warning|BackOff|Failed|Killing|OOM' "$d/events.txt" | tail -n 20 >&2
      for f in "$d"/*previous=true.log "$d"/*previous=false.log; do
        [[ -f $f ]] || continue
        echo "----- $(basename "$f")" >&2
        tail -n 12 "$f" | cut -c1-400 >&2
      done
    done
  fi
  # The test's own account last, where a reader of a truncated CI log looks:
  # which scenario failed, with what, and what each scenario logged.
  [[ -f $test_log ]] || test_log=$CLUSTER_DIR.logs/e2e/go-test.log
  if [[ $rc != 0 && -f $test_log ]]; then
    echo "e2e: FAILED: the tests' own lines (full output in $test_log):" >&2
    grep -E '_test\.go:[0-9]+:|--- FAIL|^FAIL|panic:|timed out' "$test_log" | tail -n 80 >&2 || true
  fi
  exit $rc
}
trap finish EXIT
trap 'exit 130' INT TERM

# A real Prometheus (Debian's, bin/prometheus from hack/promtool.sh) scrapes the
# cluster while the tests run. Debian builds it without Kubernetes service discovery,
# so the tests discover the targets themselves (the EndpointSlices' "metrics" ports in
# the operator's and the tests' namespaces) and keep a file_sd file current, labelled
# as the Prometheus operator labels a ServiceMonitor's targets (job = the Service's
# name), so the chart's dashboards and alert rules select them unchanged. The tests
# also load the chart's alert rules into $PROM_DIR/rules and check at the end what
# Prometheus scraped and evaluated (e2e/prometheus_test.go).
PROM_DIR=$CLUSTER_DIR/prometheus
PROM_ADDR=${PROM_ADDR:-127.0.0.1:19090}
prom_pid=
start_prometheus() {
  rm -rf "$PROM_DIR"
  mkdir -p "$PROM_DIR/rules" "$PROM_DIR/targets" "$PROM_DIR/data" "$CLUSTER_DIR/logs"
  cat > "$PROM_DIR/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$PROM_DIR/rules/*.yaml"]
scrape_configs:
- job_name: bellows
  file_sd_configs:
  - {files: ["$PROM_DIR/targets/*.json"], refresh_interval: 5s}
# The operator serves /metrics over TLS with a self-signed certificate, as the
# chart's ServiceMonitor scrapes it (insecureSkipVerify).
- job_name: bellows-operator
  scheme: https
  tls_config: {insecure_skip_verify: true}
  file_sd_configs:
  - {files: ["$PROM_DIR/operator-targets/*.json"], refresh_interval: 5s}
EOF
  "$root/bin/promtool" check config "$PROM_DIR/prometheus.yml" >/dev/null
  "$root/bin/prometheus" --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
    --web.listen-address="$PROM_ADDR" --web.enable-lifecycle >"$CLUSTER_DIR/logs/prometheus.log" 2>&1 &
  prom_pid=$!
  # The tests wait for it to be ready (newProm), and fail with its log's tail if not.
}
# prometheus-adapter (bin/prometheus-adapter, hack/prometheus-adapter.sh) serves the
# external metrics API from that Prometheus with config/autoscaling/prometheus-adapter.yaml,
# for the HorizontalPodAutoscaler scenario (e2e/hpa_test.go, which registers it with
# the aggregation layer: an APIService whose Service's endpoint is this machine).
ADAPTER_PORT=${ADAPTER_PORT:-16443}
adapter_pid=
start_adapter() {
  mkdir -p "$PROM_DIR/adapter-certs"
  "$root/bin/prometheus-adapter" --secure-port="$ADAPTER_PORT" --cert-dir="$PROM_DIR/adapter-certs" \
    --lister-kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" \
    --authorization-kubeconfig="$KUBECONFIG_ADMIN" --prometheus-url="http://$PROM_ADDR" \
    --config="$root/config/autoscaling/prometheus-adapter.yaml" --metrics-relist-interval=10s \
    >"$CLUSTER_DIR/logs/prometheus-adapter.log" 2>&1 &
  adapter_pid=$!
}
stop_prometheus() {
  local pid
  for pid in $adapter_pid $prom_pid; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  adapter_pid= prom_pid=
}

test_log=$CLUSTER_DIR/logs/e2e/go-test.log
start=$SECONDS
up=1
for c in "${COMPONENTS[@]}"; do pid_alive "$c" || up=0; done
if [[ $up == 1 ]]; then
  log "cluster already up: importing fresh images"
  "$root/hack/cluster-images.sh" s3 bellows
else
  # cluster-up first removes the pod network a killed cluster left here; check
  # that it does, on a namespace planted as one (hack/cluster-stale-net-test.sh).
  "$root/hack/cluster-stale-net-test.sh"
  "$root/hack/cluster-up.sh" >/dev/null
fi
log "cluster ready after $((SECONDS - start))s"
mkdir -p "$CLUSTER_DIR/logs/e2e"
start_prometheus
start_adapter
log "prometheus on http://$PROM_ADDR (config and data in $PROM_DIR), prometheus-adapter on :$ADAPTER_PORT"
cd "$root"
# The kubectl plugin scenario runs `kubectl bellows` as a user does: kubectl
# finds bin/kubectl-bellows (make kubectl-plugin) on PATH.
make --no-print-directory kubectl-plugin >&2
PATH=$root/bin:$PATH CONTAINERD_SOCK=$CONTAINERD_SOCK KUBECONFIG=$KUBECONFIG_ADMIN HELM=$root/bin/helm E2E_ARTIFACTS=$CLUSTER_DIR/logs/e2e \
  PROMETHEUS_URL=http://$PROM_ADDR PROMETHEUS_DIR=$PROM_DIR PROMETHEUS_ADAPTER_PORT=$ADAPTER_PORT \
  go test -tags e2e -count=1 -timeout "$E2E_TIMEOUT" -v ./e2e/... ${E2E_ARGS:-} 2>&1 | tee "$test_log"
log "e2e passed in $((SECONDS - start))s"
