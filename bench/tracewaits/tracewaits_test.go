package tracewaits

import (
	"bytes"
	"errors"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"
)

// A real trace of a goroutine that paces itself (a sleep, outside the
// timed work) and then, inside it, blocks on a mutex another goroutine
// holds: the account must hold the mutex wait, at the function that
// waited, and not the pacing.
func TestAnalyzeAccountsTheTimedWorksWaitsByCause(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held := make(chan struct{})
	release := make(chan struct{})
	go func() {
		mu.Lock()
		close(held)
		<-release
		mu.Unlock()
	}()
	<-held
	done := make(chan struct{})
	locking := make(chan struct{})
	go func() {
		defer close(done)
		pacedWorker(&mu, locking)
	}()
	// Hold the mutex 50 ms past the moment the worker goes for it: not a
	// wait for a condition but the length of the wait the trace records.
	<-locking
	time.Sleep(50 * time.Millisecond)
	close(release)
	<-done
	trace.Stop()

	s, err := Analyze(&buf, Options{Goroutine: "tracewaits.pacedWorker", Outside: []string{"tracewaits.sleepToPace"}})
	if err != nil {
		t.Fatal(err)
	}
	var mutexWait time.Duration
	for _, w := range s.Waits {
		if strings.Contains(w.Cause, "sleepToPace") {
			t.Errorf("the pacing is outside the timed work, but was counted: %+v", w)
		}
		if strings.HasPrefix(w.Cause, "Waiting (sync)") && strings.HasSuffix(w.Cause, "at github.com/bellows-kv/bellows/bench/tracewaits.lockInTimedWork") {
			mutexWait += w.Total
		}
	}
	// The worker went for the mutex 50 ms before it was released; a
	// loaded machine may run it late, so only part of that is asked for.
	if mutexWait < time.Millisecond {
		var out strings.Builder
		_ = Format(&out, s)
		t.Fatalf("mutex wait at lockInTimedWork %v, want ≥ 1ms; the account:\n%s", mutexWait, out.String())
	}
	if s.Total < mutexWait {
		t.Errorf("total %v is less than one of its causes, %v", s.Total, mutexWait)
	}
}

func TestAnalyzeNamesAMissingGoroutine(t *testing.T) {
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	trace.Stop()
	_, err := Analyze(&buf, Options{Goroutine: "no.such.function"})
	if !errors.Is(err, ErrNoGoroutine) || !strings.Contains(err.Error(), "no.such.function") {
		t.Fatalf("err = %v, want ErrNoGoroutine naming the frame", err)
	}
}

//go:noinline
func pacedWorker(mu *sync.Mutex, locking chan<- struct{}) {
	sleepToPace()
	close(locking)
	lockInTimedWork(mu)
}

//go:noinline
func sleepToPace() { time.Sleep(5 * time.Millisecond) }

//go:noinline
func lockInTimedWork(mu *sync.Mutex) {
	mu.Lock()
	//lint:ignore SA2001 the wait for the lock is what the test traces
	mu.Unlock()
}
