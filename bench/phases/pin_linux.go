package phases

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// PinProcess sets the CPU affinity of every thread of process pid (0: this
// process) to cpu. Threads created later inherit it from their creator.
func PinProcess(pid, cpu int) error {
	if cpu >= runtime.NumCPU() {
		return fmt.Errorf("cpu %d: the machine has %d", cpu, runtime.NumCPU())
	}
	if pid == 0 {
		pid = os.Getpid()
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pinning thread %d of %d to cpu %d: %w", tid, pid, cpu, err)
		}
	}
	return nil
}
