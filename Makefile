# Bellows. `make run` starts the embedded default; `make test` is what CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO          ?= go
BIN         := $(CURDIR)/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# Both end up in bellows_build_info's labels.
LDFLAGS     := -X github.com/bellows-kv/bellows/internal/version.Version=$(VERSION) -X github.com/bellows-kv/bellows/internal/version.Revision=$(REVISION)
STATICCHECK_VERSION := v0.8.2
HELM_VERSION := v4.3.1
# make image: the image reference and architecture of dist/bellows-image.tar
IMAGE       ?= bellows.test/bellows:$(VERSION)
IMAGE_ARCH  ?= $(shell $(GO) env GOARCH)
CA_CERTS    ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
TEST_TIMEOUT ?= 30m

.PHONY: help all build release bench-failover bellows bellows-bench kubectl-plugin run test unit race prometheus-adapter lint vet staticcheck fmt-check generate verify-generated bench-engine bench-sync-writes bench-phases bench-ycsb bench-memstore bench-txn bench-watch bench-backup clean envtest-bins chart-test helm promtool image cluster-bins cluster-up cluster-down e2e

## all: the same as build
all: build

## help: every target with what it does, from the `##` comments above each in this Makefile
help:
	@awk '/^## / { doc[n++] = substr($$0, 4); next } \
	  /^[a-zA-Z0-9_-]+:/ && n { name = $$0; sub(/:.*/, "", name); line = doc[0]; sub("^" name ": *", "", line); \
	    printf "%-20s %s\n", name, line; for (i = 1; i < n; i++) printf "%-20s %s\n", "", doc[i] } \
	  { n = 0 }' $(firstword $(MAKEFILE_LIST))

## build: the bellows binary (production) and bellows-bench (benchmarks) into bin/
build: bellows bellows-bench

## bellows: only the production binary, bin/bellows (what `make run` needs)
bellows:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bellows ./cmd/bellows

## kubectl-plugin: bin/kubectl-bellows, the kubectl plugin (`kubectl bellows`): a link
## to bin/bellows, which serves the plugin when run under that name. Put bin/ on
## PATH, or copy bin/bellows onto PATH as kubectl-bellows (docs/guide/operations.md)
kubectl-plugin: bellows
	ln -sf bellows $(BIN)/kubectl-bellows

## bellows-bench: only the benchmark driver, bin/bellows-bench
bellows-bench:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bellows-bench ./cmd/bellows-bench

## run: the embedded default, `bellows local`: one store and two compactors as
## processes on 127.0.0.1, data under bellows-data/ (RUN_ARGS adds flags); builds
## only bin/bellows
run: bellows
	$(BIN)/bellows local $(RUN_ARGS)

## test: everything CI checks: generated code is current, vet, lint, chart, all tests
test: verify-generated lint chart-test unit race

## race: concurrency tests under the race detector: the memstore's (readers during
## flatten, merge and compaction), the region's (commits racing in-memory and disk
## flushes; the model tests' concurrent readers), every storage-engine/server test
## (handlers, OpenStore, splits, merges, reassignment, balancing, forwarding) and
## cmd/bellows/store's (a store started through Run whose regions compact through the
## offload while OpenStore runs) and the WAL stream's (a fence racing its writer);
## about 2 minutes on 2 cores with a warm build cache
## (2m09s measured), the first run longer (compiling client-go and gRPC with -race)
race:
	$(GO) test -race -count=1 -timeout 10m ./storage-engine/memstore/
	$(GO) test -race -count=1 -timeout 10m -run 'TestReadsNeverGoBack|TestEager|TestModel|TestConcurrentIncrements' ./storage-engine/region/
	$(GO) test -race -count=1 -timeout 10m ./storage-engine/server/ ./cmd/bellows/store/ ./storage-engine/walarchive/

## unit: `go test ./...` with the envtest binaries, helm and promtool in place (part of test)
unit: envtest-bins helm promtool
	HELM=$(BIN)/helm PROMTOOL=$(BIN)/promtool KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## helm: helm into bin/ (hack/tool.sh; about 75 s the first time)
helm:
	hack/tool.sh helm helm.sh/helm/v4/cmd/helm $(HELM_VERSION) >/dev/null

## promtool: promtool into bin/ from Debian's prometheus package (hack/promtool.sh:
## apt-get download + dpkg-deb -x, nothing installed system-wide; skipped when present)
promtool:
	hack/promtool.sh >/dev/null

## chart-test: helm lint and helm template of charts/bellows (samples on/off, with and
## without the ServiceMonitor and PrometheusRule APIs, schema rejections), dashboard and
## alert-rule queries vs metric names, `promtool check rules` and `promtool test rules`
chart-test: helm promtool
	HELM=$(BIN)/helm PROMTOOL=$(BIN)/promtool $(GO) test -count=1 ./charts/... ./hack/metricnames/...

## release: dist/bellows, the production binary stripped of its symbol table and DWARF
## (-s -w, as the image's; stack traces keep their function names and lines)
release:
	mkdir -p dist
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o dist/bellows ./cmd/bellows

## image: dist/bellows-image.tar, the Dockerfile's image built without a Docker engine
## (docker-archive; `ctr images import`, `docker load`, `kind load image-archive`)
image:
	mkdir -p dist
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o dist/bellows-linux-$(IMAGE_ARCH) ./cmd/bellows
	$(GO) run ./hack/image -binary dist/bellows-linux-$(IMAGE_ARCH) -arch $(IMAGE_ARCH) -ca-certs '$(CA_CERTS)' \
	  -ref $(IMAGE) -version $(VERSION) -revision $(REVISION) -out dist/bellows-image.tar

## envtest-bins: kube-apiserver, kube-controller-manager and etcd for the envtest
## suites, built from the Go module proxy into bin/k8s (skipped when present)
envtest-bins:
	hack/envtest-bins.sh >/dev/null

## cluster-bins: kube-scheduler, kubelet, kube-proxy and kubectl (plus the envtest
## binaries) for the local cluster, built from the Go module proxy into bin/k8s
cluster-bins:
	hack/cluster-bins.sh >/dev/null

## cluster-up: a real single-node Kubernetes on this machine (root; containerd,
## etcd, control plane, kubelet, kube-proxy as processes; state, logs and the
## kubeconfig in .cluster/), with the bellows, pause and test S3 images imported
cluster-up:
	hack/cluster-up.sh >/dev/null

## cluster-down: stop exactly what cluster-up started and clean up after it
cluster-down:
	hack/cluster-down.sh

## e2e: the end-to-end tests (e2e/, build tag e2e) against the local cluster;
## brings it up when it is not, and down afterwards unless E2E_KEEP_CLUSTER=1
e2e: helm promtool prometheus-adapter
	hack/e2e.sh

## prometheus-adapter: bin/prometheus-adapter for the e2e's HPA, built from the Go
## module proxy (hack/prometheus-adapter.sh; about 4 minutes the first time)
prometheus-adapter:
	hack/prometheus-adapter.sh >/dev/null

## lint: gofmt, go vet and staticcheck (installed into bin/ by hack/tool.sh)
lint: fmt-check vet staticcheck

## fmt-check: gofmt -l over the tracked Go files; fails when any needs formatting
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## vet: go vet ./...
vet:
	$(GO) vet ./...

## staticcheck: staticcheck ./... (the pinned version, installed into bin/ by hack/tool.sh)
staticcheck:
	$$(hack/tool.sh staticcheck honnef.co/go/tools/cmd/staticcheck $(STATICCHECK_VERSION)) ./...

## generate: regenerate every generated file (protobuf, deepcopy, CRDs)
generate:
	hack/generate.sh

## verify-generated: fail if generated files differ from what `make generate` writes
verify-generated:
	hack/verify-generated.sh

## bench-engine: Bellows vs Pebble on the same workloads; writes bench/results/engine.md
bench-engine: build
	$(BIN)/bellows-bench engine --out bench/results/engine.md $(BENCH_ARGS)

## bench-sync-writes: Bellows vs Pebble on writes with an fsync each, 1, 4 and 16 writers of 100 B,
## 1 KiB and 4 KiB values, 3 runs; about 5 minutes. Writes bench/results/sync-writes.{json,md}
bench-sync-writes: build
	$(BIN)/bellows-bench sync-writes --out bench/results/sync-writes.md $(BENCH_ARGS)

## bench-phases: the paper's Figure 7 in its regime (block cache = data / 0.7: it holds the
## data but not old and new together), all seven warmup modes and an A/A copy × 6 interleaved
## runs: latency per phase with bootstrap intervals, client-side and inside the store, cache
## misses per 1,000 reads, CPU per process; about 22 minutes on two cores. Writes bench/results/phases.{json,md,png}
bench-phases: build
	$(BIN)/bellows-bench phases --out bench/results $(BENCH_ARGS)

## bench-ycsb: the YCSB core workloads A–F (go-ycsb over the Go client) against a fresh
## bellows local per workload; writes bench/results/ycsb.{json,md}
bench-ycsb: build
	$(BIN)/bellows-bench ycsb --out bench/results $(BENCH_ARGS)

## bench-memstore: Accordion's write results (VLDB 2018 §5): None, Basic, Eager and Adaptive on the
## same write workload (16 B keys, 100 B values, ~10 KB batches, async WAL, 64 MiB memstore,
## retention of one version, Zipf 0.99 and uniform over 2M keys, 3.5M puts per run) with a reader
## of gets and 20-key scans, 5 interleaved runs each, medians and spread; about 10 minutes on two
## idle cores (run nothing else). Writes bench/results/memstore.{json,md,png}
bench-memstore: build
	$(BIN)/bellows-bench memstore --out bench/results $(BENCH_ARGS)

## bench-txn: what snapshot-isolation transactions cost: 4-write transactions against batches in an
## in-process region (async WAL, 4 writers, 5 interleaved runs), and aborts under contention over
## 10000, 100 and 10 hot keys; two-write commits across regions against ones in one region,
## compare-and-set against puts, batches across regions against batches in one, serializable
## transactions against snapshot isolation (throughput, aborts over 1024 and 32 hot keys), and the
## bank workload against two bellows stores (SIGKILLed 10 times);
## then recovery after a SIGKILL against uptime (5-60 s of writes), with and without the WAL bound;
## about 9 minutes on two idle cores. Writes bench/results/txn.{json,md}
bench-txn: build
	$(BIN)/bellows-bench txn --out bench/results $(BENCH_ARGS)

## bench-watch: how fast watches deliver changes (commit to delivery, p99 at 1000 puts/s), what 4
## watchers cost writers, and how far behind the bucket's change feed follows, against one `bellows
## store` process of four regions (bench/results/watch.md).
## About two minutes.
bench-watch: build
	$(BIN)/bellows-bench watch --out bench/results $(BENCH_ARGS)

## bench-backup: what backups, restores and the WAL archive cost: 256 MiB in four in-process regions
## over a file bucket with a cost model (5ms + 100 MB/s per read or copy), a backup copying every
## file under a paced read/write load against the same load without one (7 interleaved runs),
## restores, and the archive's lag under steady writes; about 3 minutes. Writes bench/results/backup.{json,md}
bench-backup: build
	$(BIN)/bellows-bench backup --out bench/results $(BENCH_ARGS)

## bench-failover: a store lost with its volume: 3 stores, 12 regions, a file bucket at 5 ms per read
## + 100 MB/s and 10 ms per write, 600 writes/s; one store SIGKILLed and its WAL directory deleted; the kill to the
## first write per region, write p50/p99 and lost writes, Bucket against Local, 5 interleaved runs each; about
## 7 minutes. Writes bench/results/failover.{json,md,png}
bench-failover: build
	$(BIN)/bellows-bench failover --out bench/results $(BENCH_ARGS)

## clean: remove bin/ and dist/
clean:
	rm -rf $(BIN) dist
