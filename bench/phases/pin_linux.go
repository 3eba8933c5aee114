package phases

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Nice lowers the scheduling priority of every thread of process pid to
// nice (Linux priorities are per thread; later threads inherit them).
func Nice(pid, nice int) error {
	return eachThread(pid, func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("renicing thread %d of %d: %w", tid, pid, err)
		}
		return nil
	})
}

func eachThread(pid int, f func(tid int) error) error {
	if pid == 0 {
		pid = os.Getpid()
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := f(tid); err != nil {
			return err
		}
	}
	return nil
}

// PinProcess sets the CPU affinity of every thread of process pid (0: this
// process) to cpu. Threads created later inherit it from their creator.
func PinProcess(pid, cpu int) error {
	if cpu >= runtime.NumCPU() {
		return fmt.Errorf("cpu %d: the machine has %d", cpu, runtime.NumCPU())
	}
	var set unix.CPUSet
	set.Set(cpu)
	return eachThread(pid, func(tid int) error {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pinning thread %d of %d to cpu %d: %w", tid, pid, cpu, err)
		}
		return nil
	})
}
