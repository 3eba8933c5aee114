//go:build !unix

package phases

// settle has nothing to write back where sync(2) does not exist.
func settle() {}
