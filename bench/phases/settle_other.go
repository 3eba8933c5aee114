//go:build !unix

package phases

// settleWritesBack is recorded in the report as Config.WritebackBeforeBaseline.
const settleWritesBack = false

// settle has nothing to write back where sync(2) does not exist.
func settle() {}
