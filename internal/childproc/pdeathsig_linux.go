package childproc

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes a child die with its parent even when the parent
// is killed with SIGKILL and cannot stop it.
func setParentDeathSignal(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
