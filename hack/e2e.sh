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
export E2E_S3_IMAGE=${S3_IMAGE:-bellows.test/s3:e2e}

finish() {
  local rc=$? test_log=${test_log:-}
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

test_log=$CLUSTER_DIR/logs/e2e/go-test.log
start=$SECONDS
up=1
for c in "${COMPONENTS[@]}"; do pid_alive "$c" || up=0; done
if [[ $up == 1 ]]; then
  log "cluster already up: importing fresh images"
  "$root/hack/cluster-images.sh" s3 bellows
else
  "$root/hack/cluster-up.sh" >/dev/null
fi
log "cluster ready after $((SECONDS - start))s"
mkdir -p "$CLUSTER_DIR/logs/e2e"
cd "$root"
CONTAINERD_SOCK=$CONTAINERD_SOCK KUBECONFIG=$KUBECONFIG_ADMIN HELM=$root/bin/helm E2E_ARTIFACTS=$CLUSTER_DIR/logs/e2e \
  go test -tags e2e -count=1 -timeout "$E2E_TIMEOUT" -v ./e2e/... ${E2E_ARGS:-} 2>&1 | tee "$test_log"
log "e2e passed in $((SECONDS - start))s"
