package region

import (
	"context"
	"sync"
	"testing"
)

// The flush hook saves what the flushed WAL segments carried before they
// go. A flush while writes are taken runs it after the file with final
// false; a release's final flush runs it with final true, and the release
// does not commit before the hook returns.
func TestFlushHookRunsBeforeTheCommitAndKnowsTheFinalFlush(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	var mu sync.Mutex
	var finals []bool
	started, proceed := make(chan struct{}, 4), make(chan struct{})
	opts.BeforeFlushCommit = func(_ context.Context, final bool) {
		mu.Lock()
		finals = append(finals, final)
		mu.Unlock()
		if final {
			started <- struct{}{}
			<-proceed
		}
	}
	r := mustOpen(t, opts)
	if _, err := r.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- r.Release(ctx) }()
	<-started
	select {
	case err := <-released:
		t.Fatalf("the release ended (%v) while its final flush's hook ran", err)
	default:
	}
	close(proceed)
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(finals) != 2 || finals[0] || !finals[1] {
		t.Fatalf("hook calls with final %v, want [false true]: the flush, then the release's final flush", finals)
	}
}
