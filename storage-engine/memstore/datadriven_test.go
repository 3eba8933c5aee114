package memstore

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// TestPolicyDataDriven runs testdata/policy, which drives the pure policy
// decision and Adaptive's learning:
//
//	reset
//	    starts a new adaptiveState (t = 0.5, u unknown) and prints it.
//	decide policy=P segments=N s=N [r=F] [t=F] [u=F] [draw=F] [drops-nothing]
//	    sets t and u (u known) if given, runs decide on the state
//	    (drops-nothing: retention could drop no version of the pipeline) and
//	    prints the action and the state after it.
//	learn action=A in=N out=N uniques=N [r=F] [t=F]
//	    runs learn on the state and prints it.
//
// Run with -rewrite to regenerate the expected output.
func TestPolicyDataDriven(t *testing.T) {
	st := newAdaptiveState()
	datadriven.RunTest(t, "testdata/policy", func(t *testing.T, d *datadriven.TestData) string {
		var r float64
		d.MaybeScanArgs(t, "r", &r)
		d.MaybeScanArgs(t, "t", &st.t)
		if d.MaybeScanArgs(t, "u", &st.u) {
			st.uKnown = true
		}
		switch d.Cmd {
		case "reset":
			st = newAdaptiveState()
			return adaptiveString(&st)
		case "decide":
			var p string
			var segments, s int
			var draw float64
			d.ScanArgs(t, "policy", &p)
			d.ScanArgs(t, "segments", &segments)
			d.ScanArgs(t, "s", &s)
			d.MaybeScanArgs(t, "draw", &draw)
			a := decide(Policy(p), segments, s, r, &st, draw, d.HasArg("drops-nothing"))
			return a.String() + " " + adaptiveString(&st)
		case "learn":
			var action string
			var in, out, uniques int
			d.ScanArgs(t, "action", &action)
			d.ScanArgs(t, "in", &in)
			d.ScanArgs(t, "out", &out)
			d.ScanArgs(t, "uniques", &uniques)
			st.learn(parseAction(t, d, action), in, out, uniques, r)
			return adaptiveString(&st)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

func parseAction(t *testing.T, d *datadriven.TestData, s string) Action {
	for _, a := range []Action{Flatten, Merge, Compact} {
		if a.String() == s {
			return a
		}
	}
	d.Fatalf(t, "action %q is not flatten, merge or compact", s)
	return 0
}

func adaptiveString(st *adaptiveState) string {
	u := "unknown"
	if st.uKnown {
		u = fmt.Sprintf("%.4f", st.u)
	}
	return fmt.Sprintf("t=%.4f u=%s", st.t, u)
}

// TestPipelineDataDriven runs testdata/pipeline, a memstore driven through
// its API:
//
//	new policy=P [s=N] [r=F] [a=F] [flush=BYTES] [draws=F,F,...]
//	    a new memstore; Config.Rand returns the draws in turn (the test
//	    fails if Adaptive needs more than are listed; other policies get 0).
//	write
//	key@ts=value | key@ts del   (one version a line)
//	    one commit: BeginWrite on Active(), Add each, EndWrite. Timestamps
//	    must be above every earlier write's.
//	push [versions=N] [snapshots=(TS,...)] [horizon=TS]
//	    PushActive, then FlushInMemory with that Retention (horizon
//	    defaults to the newest timestamp written); prints the FlushResult
//	    and the view.
//	push-only
//	    PushActive alone.
//	flush-in-memory [versions=N] [snapshots=(TS,...)] [horizon=TS]
//	    FlushInMemory alone.
//	freeze
//	    Freeze; prints the view.
//	view
//	    prints the view: its horizon, then each segment newest first with
//	    its type and versions.
//	get key@ts ...
//	    View().Get of each.
//	stats | adaptive
//	    the Stats counters | the Adaptive state.
//
// Every command checks View().CheckInvariants. Run with -rewrite to
// regenerate the expected output.
func TestPipelineDataDriven(t *testing.T) {
	var m *Memstore
	var stats *Stats
	var maxTS uint64
	datadriven.RunTest(t, "testdata/pipeline", func(t *testing.T, d *datadriven.TestData) string {
		out := runPipelineCmd(t, d, &m, &stats, &maxTS)
		if m != nil {
			if err := m.View().CheckInvariants(); err != nil {
				d.Fatalf(t, "%v", err)
			}
		}
		return out
	})
}

func runPipelineCmd(t *testing.T, d *datadriven.TestData, mp **Memstore, stats **Stats, maxTS *uint64) string {
	if d.Cmd != "new" && *mp == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	m := *mp
	switch d.Cmd {
	case "new":
		var p string
		cfg := Config{PipelineSegments: 2, RedundancyThreshold: 0.5, ActiveFraction: 0.25, FlushBytes: 1 << 20}
		d.ScanArgs(t, "policy", &p)
		cfg.Policy = Policy(p)
		d.MaybeScanArgs(t, "s", &cfg.PipelineSegments)
		d.MaybeScanArgs(t, "r", &cfg.RedundancyThreshold)
		d.MaybeScanArgs(t, "a", &cfg.ActiveFraction)
		d.MaybeScanArgs(t, "flush", &cfg.FlushBytes)
		var draws []float64
		if arg, ok := d.Arg("draws"); ok {
			for _, v := range arg.Vals {
				for _, f := range strings.Split(v, ",") {
					x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
					if err != nil {
						d.Fatalf(t, "draws: %v", err)
					}
					draws = append(draws, x)
				}
			}
		}
		cfg.Rand = func() float64 {
			if len(draws) == 0 {
				if cfg.Policy == Adaptive {
					d.Fatalf(t, "Adaptive drew more numbers than the draws listed")
				}
				return 0
			}
			x := draws[0]
			draws = draws[1:]
			return x
		}
		*stats = new(Stats)
		cfg.Stats = *stats
		var err error
		if *mp, err = New(cfg); err != nil {
			return "error: " + err.Error()
		}
		*maxTS = 0
		return ""
	case "write":
		vs := parseVersions(t, d)
		var lo uint64 = kv.MaxTimestamp
		for _, v := range vs {
			lo = min(lo, v.key.TS)
		}
		if lo <= *maxTS {
			d.Fatalf(t, "write: timestamp %d is not above the newest written, %d", lo, *maxTS)
		}
		seg := m.Active()
		seg.BeginWrite()
		for _, v := range vs {
			seg.Add(v.key, v.value)
			*maxTS = max(*maxTS, v.key.TS)
		}
		seg.EndWrite()
		return ""
	case "push", "flush-in-memory":
		ret := Retention{Horizon: *maxTS}
		d.MaybeScanArgs(t, "versions", &ret.MaxVersions)
		d.MaybeScanArgs(t, "snapshots", &ret.SnapshotsDesc)
		d.MaybeScanArgs(t, "horizon", &ret.Horizon)
		slices.Sort(ret.SnapshotsDesc)
		slices.Reverse(ret.SnapshotsDesc)
		var sb strings.Builder
		if d.Cmd == "push" && !m.PushActive() {
			sb.WriteString("not pushed\n")
		}
		res := m.FlushInMemory(ret)
		fmt.Fprintf(&sb, "flattened=%d action=%s dropped=%d", res.Flattened, res.Action, res.Dropped)
		if res.Aborted {
			sb.WriteString(" aborted")
		}
		sb.WriteString("\n")
		sb.WriteString(viewString(m.View()))
		return sb.String()
	case "push-only":
		if !m.PushActive() {
			return "not pushed"
		}
		return ""
	case "freeze":
		return viewString(m.Freeze())
	case "view":
		return viewString(m.View())
	case "get":
		v := m.View()
		var sb strings.Builder
		for _, a := range d.CmdArgs {
			uk, tsText, ok := strings.Cut(a.Key, "@")
			ts, err := strconv.ParseUint(tsText, 10, 64)
			if !ok || err != nil {
				d.Fatalf(t, "get: want key@ts, got %q", a.Key)
			}
			val, kind, found := v.Get([]byte(uk), ts)
			switch {
			case !found:
				fmt.Fprintf(&sb, "%s: not found\n", a.Key)
			case kind == kv.KindDelete:
				fmt.Fprintf(&sb, "%s: deleted\n", a.Key)
			default:
				fmt.Fprintf(&sb, "%s: %s\n", a.Key, val)
			}
		}
		return sb.String()
	case "stats":
		s := *stats
		return fmt.Sprintf("in-memory-flushes=%d merges=%d compactions=%d versions-dropped=%d aborted=%d",
			s.InMemoryFlushes.Load(), s.Merges.Load(), s.Compactions.Load(), s.VersionsDropped.Load(), s.Aborted.Load())
	case "adaptive":
		return adaptiveString(&m.adaptive)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

type testVersion struct {
	key   kv.InternalKey
	value []byte
}

// parseVersions reads d's input: one version a line, key@ts=value or
// key@ts del.
func parseVersions(t *testing.T, d *datadriven.TestData) []testVersion {
	var vs []testVersion
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
		vs = append(vs, testVersion{kv.InternalKey{UserKey: []byte(uk), TS: ts, Kind: kind}, []byte(val)})
	}
	return vs
}

// viewString prints v: the horizon (if any), whether frozen, and each
// segment newest first, the active one first, with its versions in order.
func viewString(v *View) string {
	var sb strings.Builder
	if v.Horizon() != 0 {
		fmt.Fprintf(&sb, "horizon=%d\n", v.Horizon())
	}
	if v.frozen {
		sb.WriteString("frozen\n")
	}
	sb.WriteString("active skiplist:" + segmentString(v.active) + "\n")
	for i, s := range v.pipeline {
		typ := "skiplist"
		if _, ok := s.(*flat); ok {
			typ = "flat"
		}
		fmt.Fprintf(&sb, "%d %s:%s\n", i, typ, segmentString(s))
	}
	return sb.String()
}

func segmentString(s segment) string {
	var sb strings.Builder
	it := s.NewIterator()
	for ok := it.First(); ok; ok = it.Next() {
		sb.WriteString(" " + versionString(it.Key(), it.Value()))
	}
	if sb.Len() == 0 {
		return " empty"
	}
	return sb.String()
}

func versionString(k kv.InternalKey, v []byte) string {
	if k.Kind == kv.KindDelete {
		return fmt.Sprintf("%s@%d del", k.UserKey, k.TS)
	}
	return fmt.Sprintf("%s@%d=%s", k.UserKey, k.TS, v)
}
