//go:build !linux

package cpu

import (
	"errors"
	"runtime"
	"time"
)

// PinProcess is only implemented on Linux.
func PinProcess(pid, cpu int) error { return errors.New("cpu pinning needs Linux") }

// Idle is only implemented on Linux.
func Idle(pid int) error { return errors.New("SCHED_IDLE needs Linux") }

// CPUTime is only implemented on Linux.
func CPUTime(pid int) (time.Duration, error) {
	return 0, errors.New("CPU time per process needs Linux")
}

// OwnCore is only implemented on Linux.
func OwnCore() (func(), error) { return nil, errors.New("a core of its own needs Linux") }

// ThreadCPUTime is only implemented on Linux: it reports 0.
func ThreadCPUTime() time.Duration { return 0 }

// LockIdle is only implemented on Linux.
func LockIdle() (func(), error) { return nil, errors.New("SCHED_IDLE needs Linux") }

// Yield yields the goroutine's P elsewhere than Linux.
func Yield() { runtime.Gosched() }
