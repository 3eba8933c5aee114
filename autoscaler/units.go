package autoscaler

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// ParseBytes parses a size with an SI (6GB = 6·10⁹) or IEC (6GiB, 6Gi) unit,
// or a bare number of bytes.
func ParseBytes(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty size, want e.g. 6GB or 6GiB")
	}
	n, err := humanize.ParseBigBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size (want e.g. 6GB or 6GiB)", s)
	}
	f, _ := n.Float64()
	return f, nil
}

var perUnit = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// parsePer splits "X/unit" and returns X and the unit's duration. unit may be
// a name (s, m, h, d) or a Go duration (30m, 1h30m).
func parsePer(s string) (string, time.Duration, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return "", 0, fmt.Errorf("%q has no '/unit' (want e.g. 20MB/s or 1/h)", s)
	}
	unit = strings.TrimSpace(unit)
	if d, ok := perUnit[unit]; ok {
		return num, d, nil
	}
	d, err := time.ParseDuration(unit)
	if err != nil || d <= 0 {
		return "", 0, fmt.Errorf("%q: unknown time unit %q (want s, m, h, d or a duration like 30m)", s, unit)
	}
	return num, d, nil
}

// ParseByteRate parses a byte rate such as 20MB/s or 1.2GiB/min into bytes per second.
func ParseByteRate(s string) (float64, error) {
	num, per, err := parsePer(s)
	if err != nil {
		return 0, err
	}
	b, err := ParseBytes(num)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return b / per.Seconds(), nil
}

// ParseFrequency parses a count per time such as 1/h, 2.5/d or 3/30m into events per second.
func ParseFrequency(s string) (float64, error) {
	num, per, err := parsePer(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, fmt.Errorf("%q: %q is not a non-negative number", s, num)
	}
	return n / per.Seconds(), nil
}

// FormatBytes renders a byte count for messages (SI units, as the paper uses).
func FormatBytes(b float64) string {
	if b < 0 || bad(b) {
		return fmt.Sprintf("%g B", b)
	}
	return humanize.SIWithDigits(b, 3, "B")
}
