//go:build linux

package cpu

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOwnCoreConfinesTheGoroutineAndEveryOtherThread: while the core is
// held, the holder's thread may run only on the last CPU, every other
// thread of the process only on the others, and GOMAXPROCS is doubled;
// release gives every thread every CPU again and GOMAXPROCS its value.
func TestOwnCoreConfinesTheGoroutineAndEveryOtherThread(t *testing.T) {
	n := runtime.NumCPU()
	if n < 2 {
		t.Skipf("needs 2 CPUs; the machine has %d", n)
	}
	affinity := func(tid int) unix.CPUSet {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			t.Fatalf("thread %d: %v", tid, err)
		}
		return set
	}
	type held struct {
		tid     int
		own     unix.CPUSet
		release func()
		err     error
	}
	procs := runtime.GOMAXPROCS(0)
	got := make(chan held)
	releaseNow, released := make(chan struct{}), make(chan unix.CPUSet)
	go func() {
		release, err := OwnCore()
		h := held{release: release, err: err}
		if err == nil {
			h.tid = unix.Gettid()
			var set unix.CPUSet
			h.err = unix.SchedGetaffinity(0, &set)
			h.own = set
		}
		got <- h
		if err != nil {
			return
		}
		<-releaseNow
		tid := unix.Gettid()
		release()
		var set unix.CPUSet
		_ = unix.SchedGetaffinity(tid, &set)
		released <- set
	}()
	h := <-got
	if h.err != nil {
		t.Fatal(h.err)
	}
	if p := runtime.GOMAXPROCS(0); p != 2*procs {
		t.Errorf("GOMAXPROCS %d while the core is held, want %d (doubled)", p, 2*procs)
	}
	if h.own.Count() != 1 || !h.own.IsSet(n-1) {
		t.Fatalf("the holder's thread may run on %d CPUs (cpu %d set: %v), want only cpu %d", h.own.Count(), n-1, h.own.IsSet(n-1), n-1)
	}
	others := 0
	if err := eachThread(0, func(tid int) error {
		if tid == h.tid {
			return nil
		}
		others++
		if set := affinity(tid); set.IsSet(n-1) || set.Count() != n-1 {
			t.Errorf("thread %d may run on %d CPUs (the last: %v), want the %d others", tid, set.Count(), set.IsSet(n-1), n-1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if others == 0 {
		t.Fatal("no other thread was checked")
	}
	close(releaseNow)
	if set := <-released; set.Count() != n {
		t.Fatalf("after release the holder's thread may run on %d CPUs, want %d", set.Count(), n)
	}
	if p := runtime.GOMAXPROCS(0); p != procs {
		t.Errorf("GOMAXPROCS %d after release, want %d back", p, procs)
	}
	if err := eachThread(0, func(tid int) error {
		if set := affinity(tid); set.Count() != n {
			t.Errorf("after release thread %d may run on %d CPUs, want %d", tid, set.Count(), n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestThreadCPUTimeCountsWorkNotSleep: a locked goroutine's thread clock
// advances by the CPU it burns and not by the time it sleeps. The work is
// measured against the kernel's other count of the thread's CPU
// (getrusage), not against the wall clock: on a loaded machine a thread
// spinning for 50 ms of wall time may get a fraction of that CPU.
func TestThreadCPUTimeCountsWorkNotSleep(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := ThreadCPUTime()
	time.Sleep(100 * time.Millisecond)
	slept := ThreadCPUTime() - c0
	if slept > 20*time.Millisecond {
		t.Errorf("sleeping 100 ms counted %v of CPU", slept)
	}
	rusage := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c1, r1 := ThreadCPUTime(), rusage()
	for deadline := time.Now().Add(30 * time.Second); rusage()-r1 < 50*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("the thread got under 50 ms of CPU in 30 s")
		}
	}
	// getrusage counts in ticks, the thread clock exactly: allow a tick.
	if worked := ThreadCPUTime() - c1; worked < 40*time.Millisecond {
		t.Errorf("spinning for 50 ms of the thread's CPU (getrusage) counted %v", worked)
	}
}

// LockIdle gives the goroutine's own thread SCHED_IDLE, and only that
// thread, until release gives it the normal policy back.
func TestLockIdleIsTheGoroutinesThreadOnly(t *testing.T) {
	policy := func(tid int) uint32 {
		attr, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatalf("thread %d: %v", tid, err)
		}
		return attr.Policy
	}
	type locked struct {
		tid     int
		release func()
		err     error
	}
	got := make(chan locked)
	releaseNow, released := make(chan struct{}), make(chan uint32)
	go func() {
		release, err := LockIdle()
		got <- locked{tid: unix.Gettid(), release: release, err: err}
		if err != nil {
			return
		}
		<-releaseNow
		release()
		released <- policy(unix.Gettid())
	}()
	l := <-got
	if l.err != nil {
		t.Fatal(l.err)
	}
	if p := policy(l.tid); p != unix.SCHED_IDLE {
		t.Errorf("the locked thread's policy is %d, want SCHED_IDLE (%d)", p, unix.SCHED_IDLE)
	}
	var idleOthers []int
	if err := eachThread(0, func(other int) error {
		if other != l.tid && policy(other) == unix.SCHED_IDLE {
			idleOthers = append(idleOthers, other)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(idleOthers) > 0 {
		t.Errorf("threads %v other than the locked one run under SCHED_IDLE", idleOthers)
	}
	close(releaseNow)
	if p := <-released; p != unix.SCHED_NORMAL {
		t.Errorf("after release the thread's policy is %d, want SCHED_NORMAL (%d)", p, unix.SCHED_NORMAL)
	}
}
