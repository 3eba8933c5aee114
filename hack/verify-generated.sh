#!/usr/bin/env bash
# Fails if `make generate` would change any file: generated code must be
# regenerated and committed together with the source it comes from. Compares
# the tree before and after, so it also works with uncommitted edits.
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot() { git add -A -n . >/dev/null; { git status --porcelain=v1 --untracked-files=all; git diff; git ls-files -o --exclude-standard -z | xargs -0 -r sha256sum; } | sha256sum; }
before=$(snapshot)
hack/generate.sh
after=$(snapshot)
if [[ "$before" != "$after" ]]; then
  echo "generated files are stale; run 'make generate' and commit the result:" >&2
  git status --short >&2
  exit 1
fi
