//go:build !linux

package phases

import "errors"

// PinProcess is only implemented on Linux.
func PinProcess(pid, cpu int) error { return errors.New("cpu pinning needs Linux") }

// Nice is only implemented on Linux.
func Nice(pid, nice int) error { return errors.New("renicing threads needs Linux") }
