#!/usr/bin/env bash
# Regenerates every generated file in the repository. Each generator appends
# its step here; hack/verify-generated.sh runs this and diffs the result.
set -euo pipefail
cd "$(dirname "$0")/.."

# Operator: deepcopy, CRDs and RBAC from the kubebuilder markers in api/ and controllers/.
controller_gen=$(hack/tool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen v0.23.0)
"$controller_gen" object paths=./api/...
"$controller_gen" crd rbac:roleName=bellows-operator paths=./api/... paths=./controllers/... \
  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

# Protobuf: Go code for proto/**/*.proto, committed next to the .proto files.
# protoc comes from Debian's protobuf-compiler (3.21; its version is written
# into the generated headers, so every machine must use the same one); the Go
# plugins are pinned here.
protoc_version=3.21.12
if ! command -v protoc >/dev/null || [[ "$(protoc --version)" != "libprotoc $protoc_version" ]]; then
  echo "installing protobuf-compiler (protoc $protoc_version) from Debian" >&2
  sudo=""; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get install -y protobuf-compiler >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y protobuf-compiler >&2; }
  if [[ "$(protoc --version)" != "libprotoc $protoc_version" ]]; then
    echo "protoc is $(protoc --version), want libprotoc $protoc_version: generated headers would differ" >&2
    exit 1
  fi
fi
protoc_gen_go=$(hack/tool.sh protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.12)
protoc_gen_go_grpc=$(hack/tool.sh protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2)
find proto -name '*.pb.go' -delete
mapfile -t protos < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
protoc -I proto \
  --plugin=protoc-gen-go="$protoc_gen_go" --go_out=proto --go_opt=paths=source_relative \
  --plugin=protoc-gen-go-grpc="$protoc_gen_go_grpc" --go-grpc_out=proto --go-grpc_opt=paths=source_relative \
  "${protos[@]}"

# Last: generated code is input to the module graph (it imports grpc).
go mod tidy
