// Package version holds the build's version, stamped by the linker.
package version

// Version is set with -ldflags "-X github.com/bellows-kv/bellows/internal/version.Version=...".
var Version = "dev"
