package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Store is the set of regions one storage pod serves, with their key ranges.
type Store struct {
	regions []*Region // by Span.Start
}

// Region is a served region and its key range.
type Region struct {
	*region.Region
	Span Span
}

// OpenStore opens every span's region. base is copied for each region, with
// Name set to the span's name and WALDir to walRoot/<name>. On error the
// regions already opened are closed.
func OpenStore(ctx context.Context, spans []Span, walRoot string, base region.Options) (*Store, error) {
	s := &Store{}
	for _, sp := range spans {
		opts := base
		opts.Name = sp.Name
		opts.WALDir = filepath.Join(walRoot, sp.Name)
		r, err := region.Open(ctx, opts)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.regions = append(s.regions, &Region{Region: r, Span: sp})
	}
	sort.Slice(s.regions, func(i, j int) bool { return bytes.Compare(s.regions[i].Span.Start, s.regions[j].Span.Start) < 0 })
	return s, nil
}

// Regions are the served regions in key order.
func (s *Store) Regions() []*Region { return s.regions }

// ByName finds a served region.
func (s *Store) ByName(name string) *Region {
	for _, r := range s.regions {
		if r.Name() == name {
			return r
		}
	}
	return nil
}

// Route finds the served region holding key, or nil.
func (s *Store) Route(key []byte) *Region {
	i := sort.Search(len(s.regions), func(i int) bool { return bytes.Compare(s.regions[i].Span.Start, key) > 0 }) - 1
	if i >= 0 && s.regions[i].Span.Contains(key) {
		return s.regions[i]
	}
	return nil
}

// Close closes every region.
func (s *Store) Close() error {
	var errs []error
	for _, r := range s.regions {
		if err := r.Close(); err != nil && !errors.Is(err, region.ErrClosed) {
			errs = append(errs, fmt.Errorf("closing %s: %w", r.Name(), err))
		}
	}
	s.regions = nil
	return errors.Join(errs...)
}
