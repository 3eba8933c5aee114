package docs

import "syscall"

// dieWithParent makes `bellows local` (and so its children, which it starts
// the same way) stop when the test binary dies without cleaning up, e.g. on
// a test timeout.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
