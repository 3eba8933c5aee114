package cli

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes a child die with bellows local even when local
// itself is killed with SIGKILL and cannot stop it.
func setParentDeathSignal(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
