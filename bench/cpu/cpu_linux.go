// Package cpu keeps a benchmark's parties out of each other's CPU, as they
// would be on separate machines: thread affinity for a process or for one
// goroutine, SCHED_IDLE, and CPU time per process. Linux only.
package cpu

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

// OwnCore gives the calling goroutine the machine's last CPU to itself
// until the returned release is called (by the same goroutine): every
// other thread of this process is confined to the other CPUs, and the
// goroutine is locked to its thread, confined to the last one. Threads
// the runtime starts later inherit the confinement of the thread that
// starts them, and a locked thread never starts one itself (the runtime's
// template thread, started here while the thread is still confined to
// the others, does).
//
// A goroutine runs only on a P, and a woken one waits for a free P however
// idle its CPU: OwnCore doubles GOMAXPROCS while it is held, so that the
// rest of the process, however many of its goroutines are runnable on its
// CPUs, rarely holds every P when the goroutine wakes (with one P more,
// two writers and a memstore's in-memory flush held all three, and a
// reader woke to wait out a 10 ms time slice). The
// goroutine should sleep between its work, not spin: a spinning goroutine
// keeps its P, and the timers and wakeups of the goroutines that ran on
// that P while it was preempted wait there for its next preemption (10
// ms), which slows every sleeper of the process to about 100 wakeups a
// second. release gives every thread every CPU again and GOMAXPROCS its
// value.
func OwnCore() (release func(), err error) {
	n := runtime.NumCPU()
	if n < 2 {
		return nil, fmt.Errorf("a core of its own needs 2 CPUs; the machine has %d", n)
	}
	var all, others, own unix.CPUSet
	for c := range n {
		all.Set(c)
		if c < n-1 {
			others.Set(c)
		}
	}
	own.Set(n - 1)
	setAll := func(set *unix.CPUSet) error {
		// Twice: a thread started while the first pass ran may have
		// inherited the old set from a thread not yet confined.
		for range 2 {
			if err := eachThread(0, func(tid int) error { return unix.SchedSetaffinity(tid, set) }); err != nil {
				return fmt.Errorf("thread affinity: %w", err)
			}
		}
		return nil
	}
	if err := setAll(&others); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	if err := unix.SchedSetaffinity(0, &own); err != nil {
		runtime.UnlockOSThread()
		_ = setAll(&all)
		return nil, fmt.Errorf("thread affinity: %w", err)
	}
	procs := runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(2 * procs)
	return func() {
		runtime.GOMAXPROCS(procs)
		_ = setAll(&all)
		runtime.UnlockOSThread()
	}, nil
}

// LockIdle locks the calling goroutine to its thread and gives the thread
// the SCHED_IDLE policy until release (called by the same goroutine): it
// then runs only on CPU time no other thread wants. A benchmark's load
// generators took it beside OwnCore: the runtime's threads that hand a
// woken or preempted goroutine back to OwnCore's locked thread share the
// load's CPU, and behind load threads of the normal policy that handoff
// waited out their time slices (1–16 ms). But an idle thread that holds
// one of the runtime's Ps must run to stop for the GC, and behind busy
// threads of the normal policy the kernel runs it about every half second:
// every goroutine then waits that long at the GC's stop-the-world and mark
// termination (docs/memstore.md, "Measuring reads while writers run flat
// out"). Yield between requests is the load generators' default now.
// release restores the normal policy and unlocks; if it cannot restore it,
// it leaves the goroutine locked, so that the runtime ends the thread with
// the goroutine and no other goroutine inherits the idle policy.
func LockIdle() (release func(), err error) {
	runtime.LockOSThread()
	idle := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	if err := unix.SchedSetAttr(0, &idle, 0); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("SCHED_IDLE for this thread: %w", err)
	}
	return func() {
		normal := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
		if unix.SchedSetAttr(0, &normal, 0) == nil {
			runtime.UnlockOSThread()
		}
	}, nil
}

// Yield gives the calling thread's CPU to any other thread waiting for it
// (sched_yield). A load generator that yields between requests leaves the
// Go runtime's threads on its CPU the gaps a server's request handlers
// leave while they wait on the network: a thread that must hand a woken
// goroutine its locked thread back, or stop for the GC, waits one request
// at most. A raw system call: the runtime need not hand the P elsewhere
// for a call that returns as soon as the others have run.
func Yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// ThreadCPUTime is the CPU time, user and system, the calling thread has
// used (CLOCK_THREAD_CPUTIME_ID). It measures one goroutine only while the
// goroutine is locked to its thread (OwnCore locks it): the difference of
// two readings around a piece of work is then that work's CPU, and the
// rest of its wall time was spent waiting.
func ThreadCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
