// Package controllers holds the KVCluster and CompactionPool reconcilers.
package controllers
