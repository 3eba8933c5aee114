// Package e2e holds the end-to-end tests (build tag e2e): the Helm chart and
// config/samples (through the overlay in e2e/overlay) on a real Kubernetes,
// with a real workload and faults. `make e2e` runs them against the local
// single-node cluster of hack/cluster-up.sh; see hack/e2e.sh for the
// environment they expect (KUBECONFIG, HELM, E2E_ARTIFACTS, CONTAINERD_SOCK).
package e2e
