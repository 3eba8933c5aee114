package blob

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// CostModel makes a local bucket cost what a remote object store or network
// disk costs: each read (a ranged read of an opened object, or a whole
// object's ReadAll: one GET) waits Latency plus its size over Bandwidth,
// and with WriteLatency set each write (WriteAll, a writer's Close: one
// PUT) waits WriteLatency plus its size over Bandwidth. Benchmarks use it
// so that a cache miss is not a page-cache hit and a PUT is not a rename.
// It travels in the bucket URL
// (bellows_latency=5ms&bellows_bandwidth=200MB/s&bellows_write_latency=10ms),
// so store and compaction processes opening the same URL pay the same
// costs. A copy (Copy, CopyTo) costs what reading the object does: the
// service, or this process, moves its bytes at the same bandwidth; CopyTo
// also pays the destination's write. Listings, existence checks and
// deletes cost nothing.
type CostModel struct {
	Latency   time.Duration
	Bandwidth float64 // bytes per second; 0: unlimited
	// WriteLatency is what one write (a PUT) waits, before the object is
	// written; 0: writes cost nothing, whatever Bandwidth says.
	WriteLatency time.Duration
}

const (
	latencyParam      = "bellows_latency"
	bandwidthParam    = "bellows_bandwidth"
	writeLatencyParam = "bellows_write_latency"
)

func (m CostModel) active() bool { return m.Latency > 0 || m.Bandwidth > 0 }

func (m CostModel) writes() bool { return m.WriteLatency > 0 }

func (m CostModel) String() string {
	if !m.active() && !m.writes() {
		return "none"
	}
	bw := "unlimited"
	if m.Bandwidth > 0 {
		bw = humanize.Bytes(uint64(m.Bandwidth)) + "/s"
	}
	s := fmt.Sprintf("%v per read + %s", m.Latency, bw)
	if m.writes() {
		s += fmt.Sprintf(", %v per write", m.WriteLatency)
		if m.Bandwidth > 0 {
			s += " + " + bw
		}
	}
	return s
}

// WithCostModel returns rawURL with the model's parameters set.
func WithCostModel(rawURL string, m CostModel) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	if m.Latency > 0 {
		q.Set(latencyParam, m.Latency.String())
	}
	if m.Bandwidth > 0 {
		q.Set(bandwidthParam, fmt.Sprintf("%.0fB/s", m.Bandwidth))
	}
	if m.WriteLatency > 0 {
		q.Set(writeLatencyParam, m.WriteLatency.String())
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// takeCostModel removes the model's parameters from u and parses them.
func takeCostModel(u *url.URL) (CostModel, error) {
	var m CostModel
	q := u.Query()
	if v := q.Get(latencyParam); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return m, fmt.Errorf("%s=%q: want a duration such as 5ms", latencyParam, v)
		}
		m.Latency = d
	}
	if v := q.Get(bandwidthParam); v != "" {
		n, err := humanize.ParseBytes(strings.TrimSuffix(v, "/s"))
		if err != nil || n == 0 {
			return m, fmt.Errorf("%s=%q: want a rate such as 200MB/s", bandwidthParam, v)
		}
		m.Bandwidth = float64(n)
	}
	if v := q.Get(writeLatencyParam); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return m, fmt.Errorf("%s=%q: want a duration such as 10ms", writeLatencyParam, v)
		}
		m.WriteLatency = d
	}
	q.Del(latencyParam)
	q.Del(bandwidthParam)
	q.Del(writeLatencyParam)
	u.RawQuery = q.Encode()
	return m, nil
}

// Cost is the bucket's cost model.
func (b *Bucket) Cost() CostModel { return b.cost }

type costedObject struct {
	Object
	ctx  context.Context
	cost CostModel
}

func (o *costedObject) ReadAt(p []byte, off int64) (int, error) {
	if err := o.cost.wait(o.ctx, int64(len(p))); err != nil {
		return 0, err
	}
	return o.Object.ReadAt(p, off)
}

// wait waits what reading n bytes costs.
func (m CostModel) wait(ctx context.Context, n int64) error {
	if !m.active() {
		return nil
	}
	return m.sleep(ctx, m.Latency, n)
}

// writeWait waits what writing n bytes costs.
func (m CostModel) writeWait(ctx context.Context, n int64) error {
	if !m.writes() {
		return nil
	}
	return m.sleep(ctx, m.WriteLatency, n)
}

// sleep waits d plus n bytes over the bandwidth.
func (m CostModel) sleep(ctx context.Context, d time.Duration, n int64) error {
	if m.Bandwidth > 0 {
		d += time.Duration(float64(n) / m.Bandwidth * float64(time.Second))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// costedWriter is a writer whose Close, the PUT, waits the model's write
// cost first: the object becomes visible only after it.
type costedWriter struct {
	io.WriteCloser
	ctx  context.Context
	cost CostModel
	n    int64
}

func (w *costedWriter) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *costedWriter) Close() error {
	if err := w.cost.writeWait(w.ctx, w.n); err != nil {
		_ = w.WriteCloser.Close()
		return err
	}
	return w.WriteCloser.Close()
}
