package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/offload"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

func TestDefaultIsTheContract(t *testing.T) {
	c := Default()
	if c.Engine != contract.DefaultEngineConfig() {
		t.Fatalf("engine defaults %+v, contract %+v", c.Engine, contract.DefaultEngineConfig())
	}
	if c.Listen != ":7400" || c.MetricsListen != ":9090" || c.Regions != 1 ||
		c.ReleaseTimeout != contract.DefaultReleaseTimeout || c.OwnershipCheckInterval != contract.DefaultOwnershipCheckInterval ||
		c.ReleasePollInterval != contract.DefaultReleasePollInterval ||
		c.RemoteBlockTimeout != contract.DefaultRemoteBlockTimeout || c.RemoteBlockRetryAfter != contract.DefaultRemoteBlockRetryAfter ||
		c.SplitBytes != contract.DefaultSplitBytes || c.SplitQPS != float64(contract.DefaultSplitQPS) {
		t.Fatalf("flag defaults: %+v", c)
	}
}

// Every mode name the contract (and so the CRD) accepts must mean a mode of
// the engine, by name.
func TestEveryContractModeIsAnEngineMode(t *testing.T) {
	for _, m := range contract.WarmupModes {
		w, err := region.ParseWarmupMode(string(m))
		if err != nil || w.String() != string(m) {
			t.Errorf("warmup mode %s: engine parses it as %v (%v)", m, w, err)
		}
	}
	for _, m := range contract.OffloadModes {
		if o, err := offload.ParseMode(string(m)); err != nil || string(o) != string(m) {
			t.Errorf("offload mode %s: engine parses it as %v (%v)", m, o, err)
		}
	}
	for _, m := range contract.SyncModes {
		if w, err := wal.ParseMode(string(m)); err != nil || w.String() != string(m) {
			t.Errorf("sync mode %s: engine parses it as %v (%v)", m, w, err)
		}
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	c := Default()
	c.Regions = 0
	c.RegionOwner = "3/2"
	c.Engine.Offload = contract.OffloadRequired
	c.Engine.Compaction.Ratio = -1
	c.ReleaseTimeout = 0
	c.ReleasePollInterval = 0
	c.RemoteBlockTimeout = 0
	c.SplitBytes = 1000
	c.SplitQPS = -1
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		"--bucket: required",
		"--wal-dir: required",
		"--regions 0: want 1 to 256",
		"--region-owner",
		"offload mode Required needs workers: pass --compactors or --compactor-service",
		"--release-timeout: 0s must be positive",
		"--release-poll-interval: 0s must be positive",
		"--remote-block-timeout: 0s must be positive",
		"--split-bytes: 1000 is under 1048576 (the least memstore)",
		"--split-qps: -1 is not a rate: write requests per second, e.g. 3000, or 0 to never split by load",
		"engine.yaml compaction.ratio: -1 must be positive",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	c = Default()
	c.Bucket, c.WALDir = "file:///tmp/b", "/tmp/w"
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with a bucket and a WAL directory: %v", err)
	}
}

func TestLoadEngineConfigFillsDefaultsAndOverrides(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(path, []byte("memstore: {bytes: 2097152}\nwarmup: {mode: RemoteCache}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.ConfigFile, c.OffloadOverride = path, contract.OffloadDisabled
	c.MemstorePolicyOverride = contract.MemstoreBasic
	if err := c.LoadEngineConfig(); err != nil {
		t.Fatal(err)
	}
	want := contract.DefaultEngineConfig()
	want.Memstore.Bytes = 2 << 20
	// maxWALBytes follows the memstore it was not given for.
	want.Memstore.MaxWALBytes = contract.DefaultMaxWALMemstores * 2 << 20
	want.Memstore.Policy = contract.MemstoreBasic
	want.Warmup.Mode = contract.WarmupRemoteCache
	want.Offload = contract.OffloadDisabled
	if c.Engine != want {
		t.Fatalf("loaded %+v, want %+v", c.Engine, want)
	}
	if err := os.WriteFile(path, []byte("memstore: {bytez: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadEngineConfig(); err == nil || !strings.Contains(err.Error(), `unknown field "bytez"`) {
		t.Fatalf("want the unknown key named, got %v", err)
	}
}

// Under --replicas-from, --region-owner is the ORDINAL alone (the replica
// count is watched); without it, ORDINAL/REPLICAS as before.
func TestRegionOwnerWithReplicasFrom(t *testing.T) {
	c := Default()
	c.Bucket, c.WALDir = "file:///b", "/w"
	for _, tc := range []struct {
		owner, from string
		ok          bool
	}{
		{"2", "ns/kv-store", true},
		{"0", "ns/kv-store", true},
		{"2/3", "ns/kv-store", false},
		{"-1", "ns/kv-store", false},
		{"2", "kv-store", false},
		{"2/3", "", true},
		{"2", "", false},
	} {
		c.RegionOwner, c.ReplicasFrom = tc.owner, tc.from
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("--region-owner %q --replicas-from %q: %v", tc.owner, tc.from, err)
		}
	}
}
