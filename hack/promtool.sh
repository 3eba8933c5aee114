#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit-test runner, for the
# chart's PrometheusRule: charts/prometheusrule_test.go) and prometheus itself (which
# hack/e2e.sh runs to scrape the e2e cluster) into bin/ from Debian's `prometheus`
# package without installing the package system-wide: `apt-get download` fetches the
# .deb, `dpkg-deb -x` unpacks it into a temporary directory, and only usr/bin/promtool
# and usr/bin/prometheus are kept, in bin/. The version is what the machine's apt
# sources offer (Debian 12: 2.42.0+ds); bin/.promtool.version records it.
# Skipped when both are there and run. Prints promtool's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
stamp="$bin/.promtool.version"
if [[ -x "$bin/promtool" && -x "$bin/prometheus" && -f "$stamp" ]] &&
  "$bin/promtool" --version >/dev/null 2>&1 && "$bin/prometheus" --version >/dev/null 2>&1; then
  echo "$bin/promtool"; exit 0
fi
for tool in apt-get dpkg-deb; do
  if ! command -v "$tool" >/dev/null; then
    echo "hack/promtool.sh: no $tool: this script takes promtool from Debian's prometheus package;" \
      "elsewhere install promtool (Prometheus 2.42 or later) and point PROMTOOL at it" >&2
    exit 1
  fi
done
mkdir -p "$bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "installing promtool and prometheus from Debian's prometheus package" >&2
# A fresh machine may have no package lists yet (or stale ones naming a version the
# mirror no longer has): refresh them once and retry.
if ! (cd "$work" && apt-get download prometheus) >"$work/apt.log" 2>&1; then
  if ! { apt-get update && (cd "$work" && apt-get download prometheus); } >>"$work/apt.log" 2>&1; then
    cat "$work/apt.log" >&2
    echo "hack/promtool.sh: apt-get download prometheus failed" >&2
    exit 1
  fi
fi
deb=$(ls "$work"/prometheus_*.deb)
dpkg-deb -x "$deb" "$work/x"
for b in promtool prometheus; do
  install -m 0755 "$work/x/usr/bin/$b" "$bin/$b.new"
  mv "$bin/$b.new" "$bin/$b"
done
dpkg-deb -f "$deb" Version > "$stamp"
echo "$bin/promtool"
