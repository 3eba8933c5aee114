#!/usr/bin/env bash
# Regenerates every generated file in the repository. Each generator appends
# its step here; hack/verify-generated.sh runs this and diffs the result.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod tidy

# Operator: deepcopy, CRDs and RBAC from the kubebuilder markers in api/ and controllers/.
controller_gen=$(hack/tool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen v0.23.0)
"$controller_gen" object paths=./api/...
"$controller_gen" crd rbac:roleName=bellows-operator paths=./api/... paths=./controllers/... \
  output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
