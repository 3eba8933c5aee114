#!/usr/bin/env bash
# perf-store.sh: where a store's CPU goes in the baseline and the warmup of
# one Figure 7 run (README, "What the warmup cost the store").
#
#   hack/perf-store.sh [MODE] [KEYS]     (default ThrottledIncremental 60000)
#
# Runs `bellows-bench phases --repeat 1 --control-keys 0` with perf record -g
# on the store process, then prints, for the baseline's last 7.5 s and the
# warmup's first 7.5 s, the store's CPU time and the share of a few frames
# (inclusive). The warmup window starts at the first sample in
# Reader.InsertStoredBlock; the baseline is placed from the run's JSON.
# Needs perf (linux-perf) and root or perf_event_paranoid ≤ 1.
set -euo pipefail
mode=${1:-ThrottledIncremental}
keys=${2:-60000}
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/perf-store.XXXX)
go build -o "$out/bellows" ./cmd/bellows
go build -o "$out/bellows-bench" ./cmd/bellows-bench
"$out/bellows-bench" phases --bellows "$out/bellows" --keys "$keys" --modes "$mode" --repeat 1 --control-keys 0 --out "$out" >"$out/bench.log" 2>&1 &
bench=$!
pid=""
for _ in $(seq 1 300); do
	pid=$(pgrep -f "$out/bellows store" | head -1 || true)
	[ -n "$pid" ] && break
	sleep 0.1
done
[ -n "$pid" ] || { echo "no store process started; see $out/bench.log" >&2; exit 1; }
perf record -F 1999 -g -p "$pid" -o "$out/store.perf" >"$out/perf.log" 2>&1 &
perfpid=$!
wait "$bench"
kill -INT "$perfpid" 2>/dev/null || true
wait "$perfpid" || true

read -r switch_s <<<"$(python3 -c "import json;m=json.load(open('$out/phases.json'))['modes'][0];print(m['switch_s'])")"
read -r warm_at <<<"$(perf script -i "$out/store.perf" -F time,ip,sym 2>/dev/null |
	awk '/^ *[0-9]+\.[0-9]+:/ {t=$1+0} /InsertStoredBlock/ {printf "%.3f\n", t; exit}')"
[ -n "$warm_at" ] || { echo "no warmup samples (mode $mode warms nothing from a worker?)" >&2; exit 1; }
began=$(python3 -c "print($warm_at - $switch_s)")
for w in "baseline $(python3 -c "print(f'{$began+0.2:.3f},{$began+7.7:.3f}')")" "warmup $(python3 -c "print(f'{$warm_at:.3f},{$warm_at+7.5:.3f}')")"; do
	set -- $w
	echo "== $1 (perf time $2)"
	perf report -i "$out/store.perf" --time "$2" --children --sort sym --stdio -g none 2>/dev/null |
		awk '/Event count/ {printf "store CPU: %.2f cores\n", $NF/7.5e9} /warmBlocks$|runtime.newstack$|memclrNoHeapPointers$|\(\*Server\).handleStream$|http2Client\).reader$|gcBgMarkWorker$/'
done
echo "perf data and the run: $out"
