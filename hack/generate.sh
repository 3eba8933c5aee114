#!/usr/bin/env bash
# Regenerates every generated file in the repository. Each generator appends
# its step here; hack/verify-generated.sh runs this and diffs the result.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod tidy
