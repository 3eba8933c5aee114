//go:build unix

package phases

import "syscall"

// settleWritesBack is recorded in the report as Config.WritebackBeforeBaseline.
const settleWritesBack = true

// settle writes every dirty page of the machine back to disk and returns
// when the kernel has (sync(2) waits on Linux).
func settle() { syscall.Sync() }
