package changefeed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

// JSONChange is a change as the feed's JSON output and its webhook carry
// it: the key and value in base64 (JSON's encoding of bytes).
type JSONChange struct {
	CommitTS uint64 `json:"commit_ts"`
	Type     string `json:"type"` // "put" or "delete"
	Key      []byte `json:"key"`
	Value    []byte `json:"value,omitempty"`
	ExpiryTS uint64 `json:"expiry_ts,omitempty"`
}

// JSONOf is c as JSON carries it.
func JSONOf(c region.Change) JSONChange {
	if c.Delete {
		return JSONChange{CommitTS: c.TS, Type: "delete", Key: c.Key}
	}
	return JSONChange{CommitTS: c.TS, Type: "put", Key: c.Key, Value: c.Value, ExpiryTS: c.Expiry}
}

// WebhookBody is what Webhook posts: one update's changes, and its mark
// (0: none).
type WebhookBody struct {
	Changes    []JSONChange `json:"changes"`
	ResolvedTS uint64       `json:"resolved_ts,omitempty"`
}

// Webhook posts each update to URL as a JSON WebhookBody, and retries
// until the endpoint accepts it (a 2xx answer): with exponential backoff
// (or the answer's Retry-After) on a failed connection, a 5xx, 408 or
// 429, for as long as the context lasts. Any other answer is the
// endpoint refusing what it was sent, which sending it again does not
// change: Send fails, naming the status and the answer's first line.
// An update is sent again after a failure the feed did not see the end
// of, so the receiver must take a change it has seen (by key and commit
// timestamp) as a repeat: delivery is at least once.
type Webhook struct {
	URL    string
	Client *http.Client // default: a client with a 30 s timeout
	// Logger reports the failures that are retried; nil discards.
	Logger *slog.Logger
	// MaxInterval bounds the backoff between attempts (default 30 s).
	MaxInterval time.Duration
}

// Send posts u and returns once the endpoint accepted it.
func (w *Webhook) Send(ctx context.Context, u Update) error {
	body := WebhookBody{Changes: make([]JSONChange, len(u.Changes)), ResolvedTS: u.Resolved}
	for i, c := range u.Changes {
		body.Changes[i] = JSONOf(c)
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	hc := w.Client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := backoff.NewExponentialBackOff()
	b.MaxInterval = w.MaxInterval
	if b.MaxInterval <= 0 {
		b.MaxInterval = 30 * time.Second
	}
	_, err = backoff.Retry(ctx, func() (struct{}, error) {
		return struct{}{}, w.post(ctx, hc, payload)
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		log.Warn("the webhook did not take an update; retrying", "url", w.URL, "err", err, "next-try-in", next.Round(time.Millisecond))
	}))
	return err
}

func (w *Webhook) post(ctx context.Context, hc *http.Client, payload []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(payload))
	if err != nil {
		return backoff.Permanent(fmt.Errorf("changefeed: webhook %s: %w", w.URL, err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err // the connection: retried
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(answer)), "\n")
	err = fmt.Errorf("changefeed: webhook %s answered %s: %q", w.URL, resp.Status, first)
	switch {
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests:
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			return backoff.RetryAfter(s)
		}
		return err
	default:
		return backoff.Permanent(err)
	}
}

// Checkpoint keeps a feed's position in a file: the newest mark whose
// changes were all delivered, so a feed restarted from it repeats none
// before it and misses none after it.
type Checkpoint struct{ Path string }

// ErrCheckpointDamaged: the checkpoint file holds no timestamp.
var ErrCheckpointDamaged = errors.New("changefeed: the checkpoint file holds no timestamp")

// Load is the mark saved; found is false when the file does not exist.
func (c Checkpoint) Load() (ts uint64, found bool, err error) {
	b, err := os.ReadFile(c.Path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	ts, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || ts == 0 {
		return 0, false, fmt.Errorf("%w: %s holds %q: remove it to start again, or write the timestamp to resume after", ErrCheckpointDamaged, c.Path, trimmed(b))
	}
	return ts, true, nil
}

// Save writes ts, replacing the file whole (a crash leaves the old mark
// or the new one, never a torn one).
func (c Checkpoint) Save(ts uint64) error {
	tmp, err := os.CreateTemp(filepath.Dir(c.Path), "."+filepath.Base(c.Path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // nothing once renamed
	if _, err := fmt.Fprintf(tmp, "%d\n", ts); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.Path)
}

func trimmed(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
