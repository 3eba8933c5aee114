// Package controllers holds the KVCluster and CompactionPool reconcilers.
//
// A reconcile pass is a list of steps run by one runner (steps.go): pause
// first, then each child object, written by the generic ensure
// (children.go) from what the pure builders in controllers/specs return;
// the runner computes and patches the status once at the end of every pass.
package controllers
