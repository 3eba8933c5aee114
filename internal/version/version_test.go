package version

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBuildInfo(t *testing.T) {
	defer func(v, r string) { Version, Revision = v, r }(Version, Revision)
	Version, Revision = "v1.2.3", "0123abc"
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewBuildInfo())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "bellows_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one bellows_build_info series", mfs)
	}
	m := mfs[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "revision": "0123abc", "goversion": runtime.Version()}
	if len(got) != len(want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

// Without -X …Revision, the revision is the toolchain's VCS stamp, marked
// when the tree had changes, or unknown.
func TestStampedRevision(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{vcs("vcs", "git", "vcs.revision", "abc", "vcs.modified", "false"), true, "abc"},
		{vcs("vcs.modified", "true", "vcs.revision", "abc"), true, "abc-dirty"},
		{vcs("-trimpath", "true"), true, "unknown"},
		{nil, false, "unknown"},
	} {
		if got := stampedRevision(c.bi, c.ok); got != c.want {
			t.Errorf("stampedRevision(%v) = %q, want %q", c.bi, got, c.want)
		}
	}
}
