package compaction

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// TestSelectMinorDataDriven runs testdata/select_minor:
//
//	policy [default] [min=N max=N ratio=F max-bytes=N]
//	    sets the policy and prints it with its Validate result.
//	select SIZE...
//	    prints the window SelectMinor picks from files of these sizes
//	    (oldest first) as "[start,end) N bytes", or "none".
//	pending SIZE...
//	    prints EstimatePendingBytes of files of these sizes.
//
// Run with -rewrite to regenerate the expected output.
func TestSelectMinorDataDriven(t *testing.T) {
	var p Policy
	datadriven.RunTest(t, "testdata/select_minor", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "policy":
			p = Policy{}
			if d.HasArg("default") {
				p = DefaultPolicy()
			}
			d.MaybeScanArgs(t, "min", &p.MinFiles)
			d.MaybeScanArgs(t, "max", &p.MaxFiles)
			d.MaybeScanArgs(t, "ratio", &p.Ratio)
			d.MaybeScanArgs(t, "max-bytes", &p.MaxBytes)
			s := fmt.Sprintf("min=%d max=%d ratio=%v max-bytes=%d", p.MinFiles, p.MaxFiles, p.Ratio, p.MaxBytes)
			if err := p.Validate(); err != nil {
				return s + "\ninvalid: " + err.Error()
			}
			return s + "\nvalid"
		case "select", "pending":
			sizes := make([]int64, 0, len(d.CmdArgs))
			for _, a := range d.CmdArgs {
				n, err := strconv.ParseInt(a.Key, 10, 64)
				if err != nil || len(a.Vals) != 0 {
					d.Fatalf(t, "%s: %q is not a file size", d.Cmd, a.String())
				}
				sizes = append(sizes, n)
			}
			if d.Cmd == "pending" {
				return fmt.Sprintf("%d bytes", EstimatePendingBytes(sizes, p))
			}
			s, e, ok := SelectMinor(sizes, p)
			if !ok {
				return "none"
			}
			var total int64
			for _, sz := range sizes[s:e] {
				total += sz
			}
			return fmt.Sprintf("[%d,%d) %d bytes", s, e, total)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// TestMergeDataDriven runs testdata/merge: each "merge" runs a compaction
// job over one input file holding the versions of its input, one per line,
// "key@ts=value", "key@ts=value ttl=N" (a value expiring N after ts) or
// "key@ts del" (any order), and prints the output file's versions in order
// and the merge's counts (dropped-expired when any), or "empty" when
// nothing survived.
//
//	merge [major] [versions=N] [snapshots=(TS, ...)] [horizon=TS]
//
// versions is Retention.MaxVersions; snapshots are the read timestamps of
// open snapshots; horizon is MergeOptions.Horizon (0, the default: every
// version judged with versions > 0, none without). Run with -rewrite to regenerate.
func TestMergeDataDriven(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	n := 0
	datadriven.RunTest(t, "testdata/merge", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "merge" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var opts MergeOptions
		opts.Major = d.HasArg("major")
		d.MaybeScanArgs(t, "versions", &opts.Retention.MaxVersions)
		d.MaybeScanArgs(t, "snapshots", &opts.Snapshots)
		d.MaybeScanArgs(t, "horizon", &opts.Horizon)

		n++
		in, out := fmt.Sprintf("in-%d.sst", n), fmt.Sprintf("out-%d.sst", n)
		writeInput(t, d, b, in)
		res, err := Execute(ctx, b, Job{Region: "r", Inputs: []string{in}, Output: out, Merge: opts}, false)
		if err != nil {
			return "error: " + err.Error()
		}
		var sb strings.Builder
		if res.Empty {
			sb.WriteString("empty\n")
		} else {
			for _, line := range readVersions(t, b, out) {
				sb.WriteString(line + "\n")
			}
		}
		st := res.Stats
		fmt.Fprintf(&sb, "in=%d out=%d dropped=%d dropped-deletes=%d", st.InputVersions, st.OutputVersions, st.DroppedVersions, st.DroppedDeletes)
		if st.DroppedExpired > 0 {
			fmt.Fprintf(&sb, " dropped-expired=%d", st.DroppedExpired)
		}
		return sb.String()
	})
}

// writeInput writes the versions listed in d's input to an SST named key.
func writeInput(t *testing.T, d *datadriven.TestData, b *blob.Bucket, key string) {
	type version struct {
		k kv.InternalKey
		v []byte
	}
	var vs []version
	for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		kind := kv.KindSet
		spec, val, ok := strings.Cut(line, "=")
		if !ok {
			if spec, ok = strings.CutSuffix(line, " del"); !ok {
				d.Fatalf(t, "version %q: want key@ts=value or key@ts del", line)
			}
			kind = kv.KindDelete
		}
		uk, tsText, ok := strings.Cut(spec, "@")
		ts, err := strconv.ParseUint(tsText, 10, 64)
		if !ok || err != nil {
			d.Fatalf(t, "version %q: want key@ts", line)
		}
		stored := []byte(val)
		if v, ttlText, ok := strings.Cut(val, " ttl="); ok {
			ttl, err := strconv.ParseInt(ttlText, 10, 64)
			if err != nil {
				d.Fatalf(t, "version %q: want ttl=N", line)
			}
			kind, stored = kv.KindSetExpiring, kv.ExpiringValue(time.Duration(ttl), []byte(v))
		}
		vs = append(vs, version{kv.InternalKey{UserKey: []byte(uk), TS: ts, Kind: kind}, stored})
	}
	slices.SortFunc(vs, func(a, b version) int { return kv.Compare(a.k, b.k) })
	var buf bytes.Buffer
	w := sstable.NewWriter(&buf, sstable.WriterOptions{})
	for _, v := range vs {
		if err := w.Add(v.k, v.v); err != nil {
			d.Fatalf(t, "%v", err)
		}
	}
	if _, _, err := w.Finish(); err != nil {
		d.Fatalf(t, "%v", err)
	}
	if err := b.WriteAll(context.Background(), key, buf.Bytes(), false); err != nil {
		t.Fatal(err)
	}
}

// readVersions lists the versions of the SST at key in the input syntax.
func readVersions(t *testing.T, b *blob.Bucket, key string) []string {
	ctx := context.Background()
	obj, err := b.OpenObject(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	r, err := sstable.Open(obj, obj.Size(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	it := r.NewIter()
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if exp, ok := kv.Expiry(k.Kind, k.TS, it.Value()); ok {
			v, _ := kv.Read(k.Kind, k.TS, it.Value(), k.TS)
			out = append(out, fmt.Sprintf("%s@%d=%s ttl=%d", k.UserKey, k.TS, v, exp-k.TS))
		} else if k.Kind == kv.KindDelete {
			out = append(out, fmt.Sprintf("%s@%d del", k.UserKey, k.TS))
		} else {
			out = append(out, fmt.Sprintf("%s@%d=%s", k.UserKey, k.TS, it.Value()))
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
