// Package regionmap is the cluster's list of regions: their key ranges,
// where each came from, and which store slot owns it (docs/regions.md).
//
// The map lives in the bucket as numbered objects regionmap/<epoch>, each
// written create-if-absent as the successor of the writer's view (Commit),
// exactly as a region's manifests are: of two writers holding epoch n, one
// commits n+1 and the other is fenced (ErrFenced), reloads and decides
// again. So the map has one linear history, whoever proposes changes.
// The history is a fencelog.Log: Load finds the newest epoch from a head
// object in a few requests, and CollectEpochs deletes old epochs without
// letting a writer with a stale view commit into a number they freed.
//
// Invariants (Validate checks them before every commit and after every
// load):
//   - The regions' ranges are sorted, disjoint and cover the whole key
//     space: the first starts at the empty key, each starts where its
//     predecessor ends, the last is unbounded.
//   - IDs are unique and below NextID; names are unique; a retired name is
//     never live again.
//   - A region made by a split or a merge names its parents and each
//     parent's final manifest (Parents: one for a split's daughter, two in
//     key order for a merge's region); the parents are retired in the same
//     commit, so no region is live beside its parent.
//
// Ownership: a region the balancer placed (Owner set) belongs to the store
// with that ordinal while the cluster has that many stores; any other
// region belongs to slot Slot, the index of the initial region it descends
// from, served by the store with ordinal Slot mod N (N stores), as before
// regions could split or move (OwnerOf). A split keeps both, so a split
// moves nothing between stores; a merge (of two regions one store serves)
// takes the left parent's; only the balancer's commits (balance.go) move
// regions.
package regionmap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap/fencelog"
)

const prefix = "regionmap/"

// ErrFenced means another writer committed the epoch this writer tried to:
// reload the map and decide again.
var ErrFenced = errors.New("regionmap: fenced: another writer committed a newer region map")

// Region is one entry of the map.
type Region struct {
	ID   uint64 `json:"id"`
	Name string `json:"name"`
	// Start and End: the range [Start, End); a nil End is unbounded.
	Start []byte `json:"start"`
	End   []byte `json:"end,omitempty"`
	// Slot is the index of the initial region this one descends from:
	// the store with ordinal Slot mod N owns it.
	Slot int `json:"slot"`
	// Owner is the ordinal of the store the balancer placed the region
	// on; nil: the slot rule. See OwnerOf.
	Owner *int `json:"owner,omitempty"`
	// Parents, for a region made by a split (one) or a merge (two, in key
	// order): the parent regions and their final manifests, from which the
	// region derives its first one.
	Parents []Parent `json:"parents,omitempty"`
}

// Parent names a parent region of a split or merge and its final manifest
// number.
type Parent struct {
	Name     string `json:"name"`
	Manifest uint64 `json:"manifest"`
}

// UnmarshalJSON reads a region, also as maps written before merges were
// built recorded it: a split's daughter with one "parent" object instead
// of the "parents" list.
func (r *Region) UnmarshalJSON(data []byte) error {
	type plain Region
	var v struct {
		plain
		Parent *Parent `json:"parent"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*r = Region(v.plain)
	if v.Parent != nil && len(r.Parents) == 0 {
		r.Parents = []Parent{*v.Parent}
	}
	return nil
}

// Contains reports whether key falls in the region's range.
func (r Region) Contains(key []byte) bool {
	return bytes.Compare(key, r.Start) >= 0 && (r.End == nil || bytes.Compare(key, r.End) < 0)
}

// OwnerOf is the ordinal of the store that serves r in a cluster of n
// stores: Owner when it is one of them, else Slot mod n. A region placed on
// a store that has since left (scale-down) thus falls back to its slot's
// store until the balancer places it again, never to no store.
func (r Region) OwnerOf(n int) int {
	if n < 1 {
		return -1
	}
	if r.Owner != nil && *r.Owner >= 0 && *r.Owner < n {
		return *r.Owner
	}
	return r.Slot % n
}

// Map is one epoch of the region map.
type Map struct {
	// Epoch is the map's object number; 0: none committed yet.
	Epoch  uint64   `json:"epoch"`
	NextID uint64   `json:"nextID"`
	Region []Region `json:"regions"`
	// Retired are the names of regions split or merged away: never live
	// again; a store removes what it keeps locally for them (their WAL
	// directory).
	Retired []string `json:"retired,omitempty"`
	// Committed is when the epoch was committed, by its writer's clock:
	// its predecessor's age, for CollectEpochs. The zero time (epochs
	// written before it was recorded): long ago.
	Committed time.Time `json:"committed,omitzero"`

	// entry is the epoch's object as it was read or written: a commit on
	// this map checks against it (fencelog.Log.Create).
	entry fencelog.Entry
}

// Name of region id: region-000, region-001, … (the names regions had
// before the map, so a bucket written then keeps its regions).
func Name(id uint64) string { return fmt.Sprintf("region-%03d", id) }

// Initial is the map of a new cluster: one region per range, region i
// named Name(i) in slot i. bounds are the split keys, strictly ascending.
func Initial(bounds [][]byte) (Map, error) {
	m := Map{NextID: uint64(len(bounds) + 1)}
	start := []byte{}
	for i := 0; i <= len(bounds); i++ {
		r := Region{ID: uint64(i), Name: Name(uint64(i)), Start: start, Slot: i}
		if i < len(bounds) {
			r.End = bounds[i]
			start = bounds[i]
		}
		m.Region = append(m.Region, r)
	}
	return m, m.Validate()
}

// Validate checks the package invariants.
func (m Map) Validate() error {
	if len(m.Region) == 0 {
		return errors.New("regionmap: no regions")
	}
	if len(m.Region[0].Start) != 0 {
		return fmt.Errorf("regionmap: the first region %s starts at %q, not the empty key", m.Region[0].Name, m.Region[0].Start)
	}
	ids := map[uint64]bool{}
	names := map[string]bool{}
	for _, n := range m.Retired {
		names[n] = true
	}
	for i, r := range m.Region {
		switch {
		case r.ID >= m.NextID:
			return fmt.Errorf("regionmap: region %s has id %d, not below the next id %d", r.Name, r.ID, m.NextID)
		case ids[r.ID]:
			return fmt.Errorf("regionmap: id %d is used twice", r.ID)
		case names[r.Name]:
			return fmt.Errorf("regionmap: name %s is used twice or was retired", r.Name)
		case i > 0 && !bytes.Equal(m.Region[i-1].End, r.Start):
			return fmt.Errorf("regionmap: %s ends at %q but %s starts at %q: ranges must be contiguous",
				m.Region[i-1].Name, m.Region[i-1].End, r.Name, r.Start)
		case i < len(m.Region)-1 && r.End == nil:
			return fmt.Errorf("regionmap: %s is unbounded but is not the last region", r.Name)
		case r.End != nil && bytes.Compare(r.Start, r.End) >= 0:
			return fmt.Errorf("regionmap: %s has the empty range [%q, %q)", r.Name, r.Start, r.End)
		case r.Slot < 0:
			return fmt.Errorf("regionmap: %s has the negative slot %d", r.Name, r.Slot)
		case r.Owner != nil && *r.Owner < 0:
			return fmt.Errorf("regionmap: %s has the negative owner %d", r.Name, *r.Owner)
		}
		ids[r.ID] = true
		names[r.Name] = true
	}
	for _, r := range m.Region {
		for _, p := range r.Parents {
			if _, live := m.ByName(p.Name); live {
				return fmt.Errorf("regionmap: %s names %s as its parent, which is still live: a split or merge retires its parents", r.Name, p.Name)
			}
		}
	}
	if last := m.Region[len(m.Region)-1]; last.End != nil {
		return fmt.Errorf("regionmap: the last region %s ends at %q: the key space past it is in no region", last.Name, last.End)
	}
	return nil
}

// Find is the region holding key.
func (m Map) Find(key []byte) Region {
	i := sort.Search(len(m.Region), func(i int) bool { return bytes.Compare(m.Region[i].Start, key) > 0 }) - 1
	return m.Region[max(i, 0)]
}

// ByName is the live region named name.
func (m Map) ByName(name string) (Region, bool) {
	i := slices.IndexFunc(m.Region, func(r Region) bool { return r.Name == name })
	if i < 0 {
		return Region{}, false
	}
	return m.Region[i], true
}

// Split is the map with region name split at key into two daughters in its
// slot, both derived from the parent's final manifest parentManifest. key
// must be strictly inside the region's range. The result is not committed.
func (m Map) Split(name string, key []byte, parentManifest uint64) (Map, error) {
	i := slices.IndexFunc(m.Region, func(r Region) bool { return r.Name == name })
	if i < 0 {
		return Map{}, fmt.Errorf("regionmap: no region %s to split (epoch %d)", name, m.Epoch)
	}
	p := m.Region[i]
	if bytes.Compare(key, p.Start) <= 0 || (p.End != nil && bytes.Compare(key, p.End) >= 0) {
		return Map{}, fmt.Errorf("regionmap: split key %q is not strictly inside %s [%q, %q)", key, name, p.Start, p.End)
	}
	parents := []Parent{{Name: name, Manifest: parentManifest}}
	l := Region{ID: m.NextID, Start: p.Start, End: bytes.Clone(key), Slot: p.Slot, Owner: p.Owner, Parents: parents}
	r := Region{ID: m.NextID + 1, Start: bytes.Clone(key), End: p.End, Slot: p.Slot, Owner: p.Owner, Parents: slices.Clone(parents)}
	l.Name, r.Name = Name(l.ID), Name(r.ID)
	next := m.clone()
	next.NextID += 2
	next.Region = slices.Concat(m.Region[:i], []Region{l, r}, m.Region[i+1:])
	next.Retired = append(next.Retired, name)
	return next, next.Validate()
}

// Merge is the map with the adjacent regions left and right (left's range
// ends where right's starts) replaced by one region over both ranges, in
// left's slot, deriving from the parents' final manifests nLeft and
// nRight. Both names are retired. The result is not committed.
func (m Map) Merge(left, right string, nLeft, nRight uint64) (Map, error) {
	i := slices.IndexFunc(m.Region, func(r Region) bool { return r.Name == left })
	j := slices.IndexFunc(m.Region, func(r Region) bool { return r.Name == right })
	switch {
	case i < 0 && j < 0:
		return Map{}, fmt.Errorf("regionmap: merging %s and %s: neither is a live region (epoch %d)", left, right, m.Epoch)
	case i < 0:
		return Map{}, fmt.Errorf("regionmap: merging %s and %s: no region %s (epoch %d)", left, right, left, m.Epoch)
	case j < 0:
		return Map{}, fmt.Errorf("regionmap: merging %s and %s: no region %s (epoch %d)", left, right, right, m.Epoch)
	case i == j:
		return Map{}, fmt.Errorf("regionmap: merging %s with itself", left)
	case j == i-1:
		return Map{}, fmt.Errorf("regionmap: merging %s and %s: %s is the right one of the two (it starts where %s ends); name the left region first",
			left, right, left, right)
	case j != i+1:
		l, r := m.Region[i], m.Region[j]
		return Map{}, fmt.Errorf("regionmap: merging %s [%q, %s) and %s [%q, %s): not adjacent; the left region must end where the right one starts",
			left, l.Start, endString(l.End), right, r.Start, endString(r.End))
	}
	l, r := m.Region[i], m.Region[j]
	merged := Region{ID: m.NextID, Start: l.Start, End: r.End, Slot: l.Slot, Owner: l.Owner,
		Parents: []Parent{{Name: left, Manifest: nLeft}, {Name: right, Manifest: nRight}}}
	merged.Name = Name(merged.ID)
	next := m.clone()
	next.NextID++
	next.Region = slices.Concat(m.Region[:i], []Region{merged}, m.Region[j+1:])
	next.Retired = append(next.Retired, left, right)
	return next, next.Validate()
}

func endString(end []byte) string {
	if end == nil {
		return "∞"
	}
	return fmt.Sprintf("%q", end)
}

func (m Map) clone() Map {
	m.Region = slices.Clone(m.Region)
	m.Retired = slices.Clone(m.Retired)
	return m
}

// ObjectName is the bucket key of epoch n.
func ObjectName(n uint64) string { return epochLog(nil).Key(n) }

// Retentions of the map's epochs and the lease's terms: variables only
// so that tests run the protocol at their pace; every process uses the
// defaults (fencelog's invariants).
var (
	epochRetention = contract.DefaultMapEpochRetention
	leaseRetention = contract.DefaultLeaseLogRetention
)

// epochLog is the map's history in b.
func epochLog(b fencelog.Bucket) fencelog.Log {
	return fencelog.Log{Bucket: b, Prefix: prefix, Head: true, Retention: epochRetention,
		Written: func(data []byte) (time.Time, error) {
			var m struct {
				Committed time.Time `json:"committed"`
			}
			err := json.Unmarshal(data, &m)
			return m.Committed, err
		}}
}

// Load returns the newest committed map in b, or a map with epoch 0 when
// none was committed.
func Load(ctx context.Context, b *blob.Bucket) (Map, error) { return load(ctx, b) }

func load(ctx context.Context, b fencelog.Bucket) (Map, error) {
	e, err := epochLog(b).Newest(ctx)
	if err != nil {
		return Map{}, fmt.Errorf("regionmap: finding the newest epoch: %w", err)
	}
	if e.N == 0 {
		return Map{entry: e}, nil
	}
	return decode(e)
}

// LoadEpoch returns epoch n. An epoch older than the retention
// (CollectEpochs) may be gone: blob.ErrNotFound.
func LoadEpoch(ctx context.Context, b *blob.Bucket, n uint64) (Map, error) {
	e, err := epochLog(b).Read(ctx, n)
	if err != nil {
		return Map{}, fmt.Errorf("regionmap: reading epoch %d: %w", n, err)
	}
	return decode(e)
}

func decode(e fencelog.Entry) (Map, error) {
	var m Map
	if err := json.Unmarshal(e.Data, &m); err != nil {
		return Map{}, fmt.Errorf("regionmap: decoding %s: %w", ObjectName(e.N), err)
	}
	if m.Epoch != e.N {
		return Map{}, fmt.Errorf("regionmap: %s claims epoch %d", ObjectName(e.N), m.Epoch)
	}
	if err := m.Validate(); err != nil {
		return Map{}, fmt.Errorf("regionmap: epoch %d: %w", e.N, err)
	}
	m.entry = e
	return m, nil
}

// Committed reports whether epoch n exists: the cheap check a store makes
// to notice a newer map than its own. A store polls it every second or
// so, far within the retention, so the epoch after its own is never
// collected before it looks.
func Committed(ctx context.Context, b *blob.Bucket, n uint64) (bool, error) {
	return epochLog(b).Exists(ctx, n)
}

// Commit writes next as the successor of prev (next.Epoch = prev.Epoch+1),
// create-if-absent. It returns an error matching ErrFenced if that epoch is
// taken. prev is a map Load, LoadEpoch or Commit returned (another is
// compared by its content).
func Commit(ctx context.Context, b *blob.Bucket, prev Map, next *Map) error {
	if err := next.Validate(); err != nil {
		return err
	}
	next.Epoch = prev.Epoch + 1
	next.Committed = time.Now().UTC()
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	pe := prev.entry
	var same func([]byte) bool
	if pe.N != prev.Epoch || (pe.Data == nil && prev.Epoch > 0) {
		pe = fencelog.Entry{N: prev.Epoch}
		want, err := json.Marshal(prev)
		if err != nil {
			return err
		}
		same = func(stored []byte) bool {
			var m Map
			if json.Unmarshal(stored, &m) != nil {
				return false
			}
			got, err := json.Marshal(m)
			return err == nil && bytes.Equal(got, want)
		}
	}
	e, err := epochLog(b).Create(ctx, pe, data, same)
	switch {
	case errors.Is(err, fencelog.ErrTaken):
		if errors.Is(err, blob.ErrExists) {
			return fmt.Errorf("%w (epoch %d exists)", ErrFenced, next.Epoch)
		}
		// The number was free, collected under a stale view.
		return fmt.Errorf("%w (epoch %d: %w)", ErrFenced, next.Epoch, err)
	case err != nil:
		return fmt.Errorf("regionmap: committing epoch %d: %w", next.Epoch, err)
	}
	next.entry = e
	return nil
}

// Bootstrap returns the newest map in b, committing initial as epoch 1 when
// there is none (the cluster's first start; of several stores starting at
// once, one commits and the others load it).
func Bootstrap(ctx context.Context, b *blob.Bucket, initial Map) (Map, error) {
	m, err := Load(ctx, b)
	if err != nil || m.Epoch > 0 {
		return m, err
	}
	next := initial.clone()
	err = Commit(ctx, b, m, &next)
	if errors.Is(err, ErrFenced) {
		return Load(ctx, b)
	}
	return next, err
}

// CollectEpochs deletes the epochs nothing needs any more
// (docs/failover.md §7): those superseded longer than
// contract.DefaultMapEpochRetention before now, besides the newest
// contract.DefaultFencingLogKeep and every epoch from keepFrom's on (the
// oldest epoch a retained backup names, so the map of any time a restore
// can reach stays; nil or 0: none). maxOffset bounds the committers'
// clocks' offsets from this one. It returns how many it deleted.
func CollectEpochs(ctx context.Context, b *blob.Bucket, now time.Time, maxOffset time.Duration, keepFrom func(context.Context) (uint64, error)) (int, error) {
	n, err := epochLog(b).Collect(ctx, now, fencelog.Policy{Keep: contract.DefaultFencingLogKeep, MaxOffset: maxOffset, KeepFrom: keepFrom})
	if err != nil {
		return n, fmt.Errorf("regionmap: collecting epochs: %w", err)
	}
	return n, nil
}
