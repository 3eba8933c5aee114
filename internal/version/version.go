// Package version holds the build's version, stamped by the linker, and
// exports it as bellows_build_info.
package version

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set with -ldflags "-X github.com/bellows-kv/bellows/internal/version.Version=...".
var Version = "dev"

// Revision is the commit the binary was built from, set like Version
// (-X …/internal/version.Revision=…). When it is not set, the commit the Go
// toolchain stamps into a build from a git checkout is used instead (not
// there in the image build, whose context has no .git), else "unknown".
var Revision = ""

// BuildRevision is Revision, or what stands in for it when unset.
func BuildRevision() string {
	if Revision != "" {
		return Revision
	}
	return stampedRevision(debug.ReadBuildInfo())
}

func stampedRevision(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}

// NewBuildInfo returns the gauge bellows_build_info, always 1: its labels
// say which build a process runs (version, revision, goversion), so that a
// dashboard can show a rollout's progress and a query can join any series
// with the version of the pod that exported it. Every role registers it.
func NewBuildInfo() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bellows_build_info",
		Help: "Always 1; the labels say what the process was built from.",
		ConstLabels: prometheus.Labels{
			"version":   Version,
			"revision":  BuildRevision(),
			"goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}
