//go:build !linux

package cli

import "os/exec"

func setParentDeathSignal(*exec.Cmd) {}
