package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Store is the set of regions one storage pod is assigned, with their key
// ranges. A region another store still owns is claimed in the background as
// soon as that store releases it (a region moving between pods); until then
// requests for it fail with UNAVAILABLE.
type Store struct {
	opts    StoreOptions
	regions []*Assignment // by Span.Start
	cancel  context.CancelFunc
	claims  sync.WaitGroup
}

// StoreOptions configure OpenStore.
type StoreOptions struct {
	// WALRoot holds one WAL directory per region, WALRoot/<name>.
	WALRoot string
	// Region is copied for each region, with Name set to the span's name
	// and WALDir to WALRoot/<name>.
	Region region.Options
	// ClaimRetryMin and ClaimRetryMax bound the backoff between attempts to
	// claim a region another store owns. Defaults 200ms and 5s.
	ClaimRetryMin, ClaimRetryMax time.Duration
}

// EnsureDefaults fills the unset fields with their defaults.
func (o *StoreOptions) EnsureDefaults() {
	if o.Region.Logger == nil {
		o.Region.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ClaimRetryMin <= 0 {
		o.ClaimRetryMin = 200 * time.Millisecond
	}
	if o.ClaimRetryMax <= 0 {
		o.ClaimRetryMax = 5 * time.Second
	}
}

// Assignment is a region assigned to this store: open, or waiting for its
// owner to release it. (region.Region is the engine's open region itself.)
type Assignment struct {
	Span Span
	eng  atomic.Pointer[region.Region]
	// waiting is why the region is not open yet.
	waiting atomic.Pointer[error]
}

// Name is the region's name.
func (a *Assignment) Name() string { return a.Span.Name }

// Engine is the open region, or why it is not open: an error matching
// region.ErrOwned that says which store holds it (waiting for its release),
// or region.ErrClosed; either names the region (region.Error).
func (a *Assignment) Engine() (*region.Region, error) {
	if e := a.eng.Load(); e != nil {
		return e, nil
	}
	if err := a.waiting.Load(); err != nil {
		return nil, fmt.Errorf("not open yet, waiting for its owner to release it: %w", *err)
	}
	return nil, &region.Error{Region: a.Name(), Err: region.ErrClosed}
}

// OpenStore opens every span's region (see StoreOptions). A region that
// another store owns (region.ErrOwned) is claimed in the background; any other
// error closes what was opened and is returned.
func OpenStore(ctx context.Context, spans []Span, o StoreOptions) (*Store, error) {
	o.EnsureDefaults()
	base := o.Region
	bg, cancel := context.WithCancel(context.Background())
	s := &Store{opts: o, cancel: cancel}
	for _, sp := range spans {
		opts := base
		opts.Name = sp.Name
		opts.WALDir = filepath.Join(o.WALRoot, sp.Name)
		r := &Assignment{Span: sp}
		s.regions = append(s.regions, r)
		e, err := region.Open(ctx, opts)
		switch {
		case err == nil:
			r.eng.Store(e)
		case errors.Is(err, region.ErrOwned):
			r.waiting.Store(&err)
			base.Logger.Warn("region owned by another store; claiming it once released", "region", sp.Name, "err", err)
			s.claims.Add(1)
			go s.claim(bg, r, opts)
		default:
			_ = s.Close()
			return nil, err
		}
	}
	sort.Slice(s.regions, func(i, j int) bool { return bytes.Compare(s.regions[i].Span.Start, s.regions[j].Span.Start) < 0 })
	return s, nil
}

// claim retries opening r until it succeeds, fails for another reason than
// ownership, or the store closes.
func (s *Store) claim(ctx context.Context, r *Assignment, opts region.Options) {
	defer s.claims.Done()
	wait := s.opts.ClaimRetryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		e, err := region.Open(ctx, opts)
		if err == nil {
			r.eng.Store(e)
			r.waiting.Store(nil)
			opts.Logger.Info("claimed region after its owner released it", "region", r.Name())
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, region.ErrOwned) {
			opts.Logger.Error("claiming region", "region", r.Name(), "err", err)
		}
		r.waiting.Store(&err)
		wait = min(2*wait, s.opts.ClaimRetryMax)
	}
}

// Assignments are the assigned regions in key order, open or not.
func (s *Store) Assignments() []*Assignment { return s.regions }

// Open calls f for each open region.
func (s *Store) Open(f func(*Assignment, *region.Region)) {
	for _, r := range s.regions {
		if e := r.eng.Load(); e != nil {
			f(r, e)
		}
	}
}

// ByName finds an assigned region.
func (s *Store) ByName(name string) *Assignment {
	for _, r := range s.regions {
		if r.Name() == name {
			return r
		}
	}
	return nil
}

// Route finds the assigned region holding key, or nil.
func (s *Store) Route(key []byte) *Assignment {
	i := sort.Search(len(s.regions), func(i int) bool { return bytes.Compare(s.regions[i].Span.Start, key) > 0 }) - 1
	if i >= 0 && s.regions[i].Span.Contains(key) {
		return s.regions[i]
	}
	return nil
}

// stopClaims ends the background claims; a claim that succeeds meanwhile
// leaves its region open for the caller to close.
func (s *Store) stopClaims() {
	if s.cancel != nil {
		s.cancel()
	}
	s.claims.Wait()
}

// Close closes every open region without releasing it: only this store's
// WAL can reopen them (a restart).
func (s *Store) Close() error {
	s.stopClaims()
	return s.each(func(e *region.Region) error {
		if err := e.Close(); err != nil && !errors.Is(err, region.ErrClosed) {
			return err
		}
		return nil
	})
}

// Release hands every open region over: each is flushed and marked released,
// so whichever store is assigned it next claims it with every acknowledged
// write (a pod shutting down or a region moving). A region that fails to
// release is closed and stays owned by this store's WAL.
func (s *Store) Release(ctx context.Context) error {
	s.stopClaims()
	return s.each(func(e *region.Region) error { return e.Release(ctx) })
}

func (s *Store) each(f func(*region.Region) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, r := range s.regions {
		e := r.eng.Swap(nil)
		if e == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(e); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", r.Name(), err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
