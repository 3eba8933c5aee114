package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/changefeed"
)

// feedOutput is a changefeed's standard output; it cancels the command
// once done says the output so far is complete.
type feedOutput struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	done   func(out string) bool
	cancel context.CancelFunc
}

func (w *feedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.done(w.buf.String()) {
		w.cancel()
	}
	return n, err
}

func (w *feedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// runChangefeed runs `bellows changefeed ARGS` until done says its output
// is complete (or a minute passes), and returns its output and error.
func runChangefeed(t *testing.T, done func(out string) bool, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := &feedOutput{done: done, cancel: cancel}
	var errOut syncBuffer
	root := NewRootCommand()
	root.SetArgs(append([]string{"changefeed"}, args...))
	root.SetOut(out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// resolvedPast says whether a text output with --progress has a mark at
// or past ts.
func resolvedPast(ts uint64) func(string) bool {
	return func(out string) bool {
		for _, l := range strings.Split(out, "\n") {
			if mark, ok := strings.CutSuffix(l, "\tresolved"); ok {
				if v, err := strconv.ParseUint(mark, 10, 64); err == nil && v >= ts {
					return true
				}
			}
		}
		return false
	}
}

// changeLines are the output's change lines without their timestamps.
func changeLines(out string) []string {
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if _, rest, ok := strings.Cut(l, "\t"); ok && rest != "resolved" {
			got = append(got, rest)
		}
	}
	return got
}

// bellows changefeed reads the changes from the bucket alone: the puts and
// the delete after --after-ts, in commit order; --checkpoint keeps its
// place, so a second run prints only what came after the first one's
// mark; --after-ts that disagrees with the checkpoint is refused.
func TestChangefeedFollowsTheBucketAndResumesFromItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	addr := runStore(t, "--bucket=file://"+filepath.Join(dir, "bucket"), "--wal-dir="+filepath.Join(dir, "wal"), "--listen=127.0.0.1:0",
		"--wal-archive-interval=100ms")
	first := putTS(t, kv(t, addr, "put", "-o", "json", "--hex", "01", "aa"))
	kv(t, addr, "put", "--hex", "f0", "bb")
	last := putTS(t, kv(t, addr, "delete", "-o", "json", "--hex", "01"))
	bucket, checkpoint := filepath.Join(dir, "bucket"), filepath.Join(dir, "feed.pos")

	out, errOut, err := runChangefeed(t, resolvedPast(last), "--bucket", bucket, "--hex", "--progress", "--poll-interval", "50ms",
		"--after-ts", fmt.Sprint(first-1), "--checkpoint", checkpoint)
	if err != nil {
		t.Fatalf("changefeed: %v\n%s", err, errOut)
	}
	if got, want := changeLines(out), []string{"put\t01\taa", "put\tf0\tbb", "delete\t01"}; !slices.Equal(got, want) {
		t.Fatalf("changefeed printed %q, want the changes %q in commit order\n(output %q)", got, want, out)
	}
	if !strings.Contains(errOut, "resume with --after-ts") {
		t.Errorf("a stopped feed does not say where to resume: %q", errOut)
	}
	saved, found, err := changefeed.Checkpoint{Path: checkpoint}.Load()
	if err != nil || !found || saved < last {
		t.Fatalf("the checkpoint holds %d (found %t, %v), want a mark at or past the delete's %d", saved, found, err, last)
	}

	next := putTS(t, kv(t, addr, "put", "-o", "json", "--hex", "02", "cc"))
	out, errOut, err = runChangefeed(t, resolvedPast(next), "--bucket", bucket, "--hex", "--progress", "--poll-interval", "50ms", "--checkpoint", checkpoint)
	if err != nil {
		t.Fatalf("changefeed from the checkpoint: %v\n%s", err, errOut)
	}
	if got := changeLines(out); !slices.Equal(got, []string{"put\t02\tcc"}) {
		t.Fatalf("resumed from the checkpoint, changefeed printed %q, want only the put after it", got)
	}

	_, _, err = runChangefeed(t, func(string) bool { return true }, "--bucket", bucket, "--checkpoint", checkpoint, "--after-ts", "5")
	if err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Fatalf("--after-ts beside a checkpoint at another mark: %v, want a refusal", err)
	}
	if err := os.WriteFile(checkpoint, []byte("yesterday\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runChangefeed(t, func(string) bool { return true }, "--bucket", bucket, "--checkpoint", checkpoint)
	if err == nil || !strings.Contains(err.Error(), "holds no timestamp") {
		t.Fatalf("a damaged checkpoint: %v, want a refusal that names it", err)
	}
}

// --webhook posts each update as JSON and retries what the endpoint
// failed (a 503) until it takes it; an endpoint that refuses the update
// (a 400) ends the feed with an error naming the answer.
func TestChangefeedPostsToAWebhookAndRetries(t *testing.T) {
	dir := t.TempDir()
	addr := runStore(t, "--bucket=file://"+filepath.Join(dir, "bucket"), "--wal-dir="+filepath.Join(dir, "wal"), "--listen=127.0.0.1:0",
		"--wal-archive-interval=100ms")
	first := putTS(t, kv(t, addr, "put", "-o", "json", "k1", "v1"))
	last := putTS(t, kv(t, addr, "put", "-o", "json", "k2", "v2"))

	var mu sync.Mutex
	var bodies []changefeed.WebhookBody
	calls := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		var b changefeed.WebhookBody
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, fmt.Sprintf("not a feed body: %v", err), http.StatusBadRequest)
			return
		}
		bodies = append(bodies, b)
		if b.ResolvedTS >= last {
			cancel()
		}
	}))
	defer hook.Close()
	root := NewRootCommand()
	root.SetArgs([]string{"changefeed", "--bucket", filepath.Join(dir, "bucket"), "--webhook", hook.URL, "--poll-interval", "50ms",
		"--after-ts", fmt.Sprint(first - 1)})
	root.SetOut(io.Discard)
	var errOut syncBuffer
	root.SetErr(&errOut)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("changefeed --webhook: %v\n%s", err, errOut.String())
	}
	mu.Lock()
	var got []string
	for _, b := range bodies {
		for _, c := range b.Changes {
			got = append(got, fmt.Sprintf("%s %s=%s", c.Type, c.Key, c.Value))
		}
	}
	mu.Unlock()
	if want := []string{"put k1=v1", "put k2=v2"}; !slices.Equal(got, want) {
		t.Fatalf("the webhook got %q, want %q", got, want)
	}
	if !strings.Contains(errOut.String(), "retrying") {
		t.Errorf("the 503 was not reported as retried: %q", errOut.String())
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unknown tenant", http.StatusBadRequest)
	}))
	defer refusing.Close()
	_, _, err := runChangefeed(t, func(string) bool { return false }, "--bucket", filepath.Join(dir, "bucket"), "--webhook", refusing.URL,
		"--poll-interval", "50ms", "--after-ts", fmt.Sprint(first-1))
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "unknown tenant") {
		t.Fatalf("a webhook answering 400: %v, want an error naming its answer", err)
	}
}
