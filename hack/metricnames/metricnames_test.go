package metricnames

import (
	"maps"
	"reflect"
	"slices"
	"testing"
)

func TestFromGoSources(t *testing.T) {
	got, err := FromGoSources("testdata/src", "skipped")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Type{
		"bellows_kv_request_duration_seconds": Histogram, // Namespace + Subsystem + Name, constants
		"bellows_block_cache_hits_total":      Counter,
		"bellows_regions":                     Gauge,   // a full Name
		"bellows_region_sst_files":            Unknown, // NewDesc(BuildFQName(...))
		"bellows_compaction_queue_depth":      Unknown, // NewDesc("...")
		"bellows_compactor_inflight_jobs":     Gauge,   // through a helper's parameters
		"bellows_warmup_progress_ratio":       Gauge,
		"bellows_autoscaler_replicas":         Gauge, // through a function literal's parameter
		"bellows_autoscaler_desired_replicas": Gauge,
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("names\n got %v\nwant %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for n, typ := range want {
		if got[n].Type != typ {
			t.Errorf("%s: type %q, want %q", n, got[n].Type, typ)
		}
	}
}

func TestFromInterfacesDoc(t *testing.T) {
	got, err := FromInterfacesDoc("testdata/interfaces.md")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Metric{
		"bellows_kv_request_duration_seconds": {Type: Histogram, Section: "Store"},
		"bellows_block_cache_hits_total":      {Type: Counter, Section: "Store"},
		"bellows_block_cache_misses_total":    {Type: Counter, Section: "Store"},
		"bellows_block_cache_evictions_total": {Type: Counter, Section: "Store"},
		"bellows_block_cache_bytes":           {Type: Gauge, Section: "Store"},
		"bellows_block_cache_capacity_bytes":  {Type: Gauge, Section: "Store"},
		"bellows_autoscaler_replicas":         {Type: Unknown, Section: "Operator (autoscaler)"},
		// Other components' names count in the External table only.
		"up":                                   {Type: Unknown, Section: "Exported by others (Prometheus and the kubelet)"},
		"kubelet_volume_stats_available_bytes": {Type: Unknown, Section: "Exported by others (Prometheus and the kubelet)"},
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("names\n got %v\nwant %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for n, w := range want {
		if g := got[n]; g.Type != w.Type || g.Section != w.Section {
			t.Errorf("%s: %q in %q, want %q in %q", n, g.Type, g.Section, w.Type, w.Section)
		}
	}
	for n, want := range map[string]map[string][]string{
		"bellows_kv_request_duration_seconds":  {"op": {"get", "begin-txn"}, "code": {"OK", "Aborted"}},
		"kubelet_volume_stats_available_bytes": {"persistentvolumeclaim": nil},
		"bellows_block_cache_bytes":            {},
		"bellows_autoscaler_replicas":          {"pool": nil},
	} {
		if g := got[n].Labels; !reflect.DeepEqual(g, want) {
			t.Errorf("%s: labels %v, want %v", n, g, want)
		}
	}
}

func TestSeries(t *testing.T) {
	s := Set{
		"h": {Name: "h", Type: Histogram},
		"s": {Name: "s", Type: Summary},
		"g": {Name: "g", Type: Gauge},
		"u": {Name: "u", Type: Unknown},
	}
	for series, ok := range map[string]bool{
		"h": true, "h_bucket": true, "h_sum": true, "h_count": true,
		"s_sum": true, "s_count": true, "s_bucket": false,
		"g": true, "g_bucket": false, "g_count": false,
		"u_count": true, "x": false, "x_bucket": false,
	} {
		if _, got := s.Series(series); got != ok {
			t.Errorf("Series(%q) = %v, want %v", series, got, ok)
		}
	}
}
