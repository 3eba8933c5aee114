// Package specs builds the objects the operator owns, as pure functions of
// the defaulted KVCluster or CompactionPool: each builder returns the desired
// object with its name, namespace, labels, controller owner reference and
// spec-hash annotation set. The package has no client and no clock, so its
// tests compare whole objects without an API server. Writing the objects
// (create, update on a new hash) is the controllers' job.
package specs
