//go:build !linux

package docs

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
