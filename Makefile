# Bellows. `make run` starts the embedded default; `make test` is what CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO          ?= go
BIN         := $(CURDIR)/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X github.com/bellows-kv/bellows/internal/version.Version=$(VERSION)
STATICCHECK_VERSION := v0.8.2
TEST_TIMEOUT ?= 30m

.PHONY: all build run test unit lint vet staticcheck generate verify-generated bench-engine clean envtest-bins

all: build

## build: the bellows binary into bin/
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/bellows ./cmd/bellows

## run: the embedded default, `bellows local`: one store and two compactors as
## processes on 127.0.0.1, data under bellows-data/ (RUN_ARGS adds flags)
run: build
	$(BIN)/bellows local $(RUN_ARGS)

## test: everything CI checks: generated code is current, vet, lint, all tests
test: verify-generated lint unit

unit: envtest-bins
	KUBEBUILDER_ASSETS=$(BIN)/k8s $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## envtest-bins: kube-apiserver, kube-controller-manager and etcd for the envtest
## suites, built from the Go module proxy into bin/k8s (skipped when present)
envtest-bins:
	hack/envtest-bins.sh >/dev/null

## lint: gofmt, go vet and staticcheck (installed into bin/ by hack/tool.sh)
lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$$(hack/tool.sh staticcheck honnef.co/go/tools/cmd/staticcheck $(STATICCHECK_VERSION)) ./...

## generate: regenerate every generated file (protobuf, deepcopy, CRDs)
generate:
	hack/generate.sh

## verify-generated: fail if generated files differ from what `make generate` writes
verify-generated:
	hack/verify-generated.sh

## bench-engine: Bellows vs Pebble on the same workloads; writes bench/results/engine.md
bench-engine:
	$(GO) run ./bench/cmd/engine-bench -out bench/results/engine.md $(BENCH_ARGS)

clean:
	rm -rf $(BIN)
