package phases

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

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

// Idle gives every thread of process pid the SCHED_IDLE policy (threads
// created later inherit it): it runs only on CPU time no other thread
// wants, and a waking thread of the workload preempts it at once. Nice 19
// does not: under EEVDF a running nice-19 thread keeps the CPU until its
// slice ends, which a reader waking beside a compaction worker waits out.
func Idle(pid int) error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	return eachThread(pid, func(tid int) error {
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
			return fmt.Errorf("SCHED_IDLE for thread %d of %d: %w", tid, pid, err)
		}
		return nil
	})
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// CPUTime is the CPU time process pid (0: this process) has used, user and
// system, from /proc/<pid>/stat.
func CPUTime(pid int) (time.Duration, error) {
	if pid == 0 {
		pid = os.Getpid()
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields follow the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
