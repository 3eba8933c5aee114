// Package contract is what the operator and the pods it runs agree on:
// ports, paths, flag names, the engine.yaml schema, the metric names the
// operator reads, label keys, timings and every default.
//
// It is a leaf: it imports nothing of Bellows and nothing of Kubernetes, so
// the operator, the roles (store, compactor) and the storage engine all take
// their numbers from here. Nothing else holds a default:
//   - the CRD's `+kubebuilder:default` markers must equal these values (a test
//     in controllers creates objects through a real API server and compares
//     what it stored with api/v1alpha1's SetDefaults, which reads this package);
//   - the engine's option defaults read this package;
//   - docs/defaults.md is generated from Defaults() by `make generate`.
//
// Invariants, checked by contract_test.go:
//   - a store's shutdown (release, then graceful stop) fits inside the grace
//     period the operator gives its pod;
//   - a worker's drain fits inside the grace period the operator gives its pod;
//   - Default().Validate() is nil.
package contract
