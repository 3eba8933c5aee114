#!/usr/bin/env bash
# Installs a pinned Go tool into bin/ unless that exact version is already there.
# Usage: hack/tool.sh <name> <module/cmd/path> <version>
# Prints the path of the installed binary. CI machines start with nothing, so
# every tool the Makefile uses comes through here.
set -euo pipefail
name=$1 pkg=$2 ver=$3
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
stamp="$bin/.$name.version"
if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$ver" ]]; then
  echo "$bin/$name"; exit 0
fi
mkdir -p "$bin"
echo "installing $name $ver" >&2
GOBIN="$bin" GOFLAGS=-mod=mod go install "$pkg@$ver" >&2
echo "$ver" > "$stamp"
echo "$bin/$name"
