// Package engineconfig is the storage engine's settings file, engine.yaml: the
// operator writes it into a ConfigMap and `bellows store --config FILE` reads
// it. It has no Kubernetes imports so the storage engine can use it.
package engineconfig

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// FileName is the key of the settings file in the ConfigMap and its name in the
// mounted directory.
const FileName = "engine.yaml"

// Config is engine.yaml.
type Config struct {
	Memstore        Memstore   `json:"memstore"`
	BlockCacheBytes int64      `json:"blockCacheBytes"`
	Compaction      Compaction `json:"compaction"`
	// Offload is Required, Preferred or Disabled.
	Offload string `json:"offload"`
	Warmup  Warmup `json:"warmup"`
	// SyncMode is sync or async.
	SyncMode string `json:"syncMode"`
}

// Memstore configures the compacting memstore.
type Memstore struct {
	// Policy is None, Basic, Eager or Adaptive.
	Policy string `json:"policy"`
	Bytes  int64  `json:"bytes"`
}

// Compaction is the exploring/ratio minor compaction policy.
type Compaction struct {
	MinFiles int     `json:"minFiles"`
	MaxFiles int     `json:"maxFiles"`
	Ratio    float64 `json:"ratio"`
	MaxBytes int64   `json:"maxBytes"`
}

// Warmup selects the warmup mode.
type Warmup struct {
	// Mode is None, Offload, RemoteCache, PreSwitch, Incremental or ThrottledIncremental.
	Mode               string `json:"mode"`
	RateBytesPerSecond int64  `json:"rateBytesPerSecond,omitempty"`
}

// Marshal renders the file. Output is deterministic (keys sorted).
func Marshal(c Config) ([]byte, error) {
	return yaml.Marshal(c)
}

// Unmarshal parses the file, rejecting unknown keys.
func Unmarshal(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", FileName, err)
	}
	return c, nil
}
