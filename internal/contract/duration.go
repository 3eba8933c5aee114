package contract

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that engine.yaml writes as Go writes one:
// "1h", "90s" (JSON's default, integer nanoseconds, is unreadable there).
type Duration struct{ time.Duration }

// MarshalJSON writes d as a string, "1h0m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string as time.ParseDuration does; an empty string
// is zero (the default).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s is not a duration: write a string with a unit, e.g. \"1h\" or \"90s\"", b)
	}
	if s == "" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: write a number with a unit (h, m, s), e.g. \"1h\" or \"90s\"", s)
	}
	d.Duration = v
	return nil
}
