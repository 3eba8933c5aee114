package v1alpha1

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Duration is a Go duration in a spec, as written: "90s", "10m", "1h30m".
//
// It is a string, not metav1.Duration, so that every stored object decodes.
// metav1.Duration parses while it is decoded: one CompactionPool stored with
// a value that does not parse (written before the CRD rejected it, or with
// the rules bypassed) made the operator's informer fail to decode the whole
// list, and no CompactionPool in the cluster was reconciled any more. A
// string always decodes; the controllers parse it and report a bad value on
// that object alone (Degraded, reason InvalidSpec).
//
// Each Duration field carries its own CEL rule, whose message names the
// field. The rule matches Go's syntax with a regular expression before it
// calls duration() (which parses with time.ParseDuration), so a value that
// is not a duration gets the rule's message, not an evaluation error.
// MaxLength bounds the cost of those rules.
//
// +kubebuilder:validation:MaxLength=64
type Duration string

// DurationOf is d as a spec writes it.
func DurationOf(d time.Duration) Duration { return Duration(d.String()) }

// Parse is the duration d says, as time.ParseDuration reads it (the CRD's
// rules accept the same syntax, through CEL's duration()).
func (d Duration) Parse() (time.Duration, error) {
	if d == "" {
		return 0, errors.New("is empty")
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		hint := "write a number with a unit (h, m, s), e.g. 10m or 1h30m"
		if strings.HasSuffix(string(d), "d") {
			hint = "use hours, e.g. 24h for a day"
		}
		return 0, fmt.Errorf("%q is not a duration; %s", string(d), hint)
	}
	return v, nil
}

// within is d parsed and within [0, largest], or an error naming field.
func (d Duration) within(field string, largest time.Duration) (time.Duration, error) {
	v, err := d.Parse()
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %w", field, err)
	case v < 0:
		return 0, fmt.Errorf("%s: %s is negative", field, d)
	case v > largest:
		return 0, fmt.Errorf("%s: %s is above the maximum %s", field, d, largest)
	}
	return v, nil
}
