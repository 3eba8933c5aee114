package blob

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// CostModel makes reads of a local bucket cost what they cost on a remote
// object store or network disk: each read waits Latency plus its size over
// Bandwidth. Benchmarks use it so that a cache miss is not a page-cache hit.
// It travels in the bucket URL (bellows_latency=5ms&bellows_bandwidth=200MB/s),
// so compaction workers opening the same URL pay the same costs. A copy
// (Copy, CopyTo) costs what reading the object does: the service, or this
// process, moves its bytes at the same bandwidth.
type CostModel struct {
	Latency   time.Duration
	Bandwidth float64 // bytes per second; 0: unlimited
}

const (
	latencyParam   = "bellows_latency"
	bandwidthParam = "bellows_bandwidth"
)

func (m CostModel) active() bool { return m.Latency > 0 || m.Bandwidth > 0 }

func (m CostModel) String() string {
	if !m.active() {
		return "none"
	}
	bw := "unlimited"
	if m.Bandwidth > 0 {
		bw = humanize.Bytes(uint64(m.Bandwidth)) + "/s"
	}
	return fmt.Sprintf("%v per read + %s", m.Latency, bw)
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
	q.Del(latencyParam)
	q.Del(bandwidthParam)
	u.RawQuery = q.Encode()
	return m, nil
}

// Cost is the bucket's read cost model.
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

// wait waits what moving n bytes costs.
func (m CostModel) wait(ctx context.Context, n int64) error {
	if !m.active() {
		return nil
	}
	d := m.Latency
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
