// Package phases reproduces Figure 7 of Ahmad & Kemme (VLDB 2015): get and
// scan latency through the compaction and warmup phases of a major
// compaction, for each warmup mode, in one run.
package phases

import (
	"fmt"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// Config is one run. Its JSON form is phases.json's "config".
type Config struct {
	Modes          []string       `json:"modes"`
	Keys           int            `json:"keys"`
	ValueSize      int            `json:"valueSize"`
	Files          int            `json:"files"`
	BlockSize      int            `json:"blockSize"`
	CacheBytes     int64          `json:"cacheBytes"`
	Readers        int            `json:"readers"`
	ReadsPerSec    int            `json:"readsPerSecond"`
	ScanFraction   float64        `json:"scanFraction"`
	ScanLength     int            `json:"scanLength"`
	Theta          float64        `json:"zipfTheta"`
	UpdatesPerSec  int            `json:"updatesPerSecond"`
	Baseline       Duration       `json:"baseline"`
	Tail           Duration       `json:"tail"`
	Window         Duration       `json:"window"`
	MaxWarmup      Duration       `json:"maxWarmup"`
	Bucket         blob.CostModel `json:"-"`
	BucketModel    string         `json:"bucketModel"`
	TransferRate   int64          `json:"transferRateBytesPerSecond"`
	WarmupRate     int64          `json:"throttledWarmupRateBytesPerSecond"`
	CompactionRate int64          `json:"compactionRateLimitBytesPerSecond"`
	Pinning        string         `json:"cpuPinning"`
	Store          string         `json:"store"`
	Seed           uint64         `json:"seed"`
	// Repeats runs every mode this many times, interleaved; the report
	// gives medians.
	Repeats int `json:"repeats,omitempty"`
}

// Duration marshals as a Go duration string.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("%q", time.Duration(d))), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := time.ParseDuration(strings.Trim(string(b), `"`))
	*d = Duration(v)
	return err
}

// Default is a run that finishes in a few minutes on two cores.
func Default() Config {
	return Config{
		Modes:         []string{"None", "Offload", "RemoteCache", "PreSwitch", "Incremental", "ThrottledIncremental"},
		Keys:          30000,
		ValueSize:     1000,
		Files:         4,
		BlockSize:     32 << 10,
		CacheBytes:    256 << 20,
		Readers:       4,
		ReadsPerSec:   6000,
		ScanFraction:  0.1,
		ScanLength:    20,
		Theta:         0.99,
		UpdatesPerSec: 200,
		Baseline:      Duration(8 * time.Second),
		Tail:          Duration(2 * time.Second),
		Window:        Duration(250 * time.Millisecond),
		MaxWarmup:     Duration(30 * time.Second),
		Bucket:        blob.CostModel{Latency: 5 * time.Millisecond, Bandwidth: 200e6},
		TransferRate:  0,
		WarmupRate:    8e6,
		Seed:          7,
	}
}

func (c Config) validate() error {
	for _, m := range c.Modes {
		if _, err := region.ParseWarmupMode(m); err != nil {
			return fmt.Errorf("--modes: %w", err)
		}
	}
	switch {
	case c.Keys <= 0 || c.ValueSize <= 0 || c.Files <= 0:
		return fmt.Errorf("--keys, --value-size and --files must be positive")
	case c.Readers <= 0 || c.ReadsPerSec <= 0:
		return fmt.Errorf("--readers and --reads must be positive")
	case c.ScanFraction < 0 || c.ScanFraction > 1:
		return fmt.Errorf("--scan-fraction %v must be within [0,1]", c.ScanFraction)
	case c.WarmupRate <= 0:
		return fmt.Errorf("--warmup-rate must be positive (ThrottledIncremental)")
	case c.Window <= 0 || c.Baseline <= 0:
		return fmt.Errorf("--window and --baseline must be positive")
	}
	return nil
}
