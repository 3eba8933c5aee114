//go:build !linux

package childproc

import "os/exec"

func setParentDeathSignal(*exec.Cmd) {}
