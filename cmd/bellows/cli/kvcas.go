package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/client"
)

// casFlags are put's and delete's compare-and-set conditions: at most one
// of --if-value, --if-absent and --if-version.
type casFlags struct {
	ifValue   string
	ifAbsent  bool
	ifVersion uint64
}

func (cf *casFlags) register(cmd *cobra.Command, absent bool) {
	cmd.Flags().StringVar(&cf.ifValue, "if-value", "", "write only if the key's value is this now (compare-and-set; with --hex, hexadecimal)")
	cmd.Flags().Uint64Var(&cf.ifVersion, "if-version", 0, "write only if the key's newest version was committed at this timestamp (a put's COMMIT_TS)")
	if absent {
		cmd.Flags().BoolVar(&cf.ifAbsent, "if-absent", false, "write only if the key has no value now (create, never overwrite)")
	}
}

// condition is the condition the flags give, and whether they give one.
func (cf *casFlags) condition(cmd *cobra.Command, c codec) (client.Condition, bool, error) {
	set := 0
	for _, name := range []string{"if-value", "if-absent", "if-version"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			set++
		}
	}
	switch {
	case set == 0:
		return client.Condition{}, false, nil
	case set > 1:
		return client.Condition{}, false, errors.New("give at most one of --if-value, --if-absent and --if-version")
	case cmd.Flags().Changed("if-value"):
		v, err := c.arg("--if-value", cf.ifValue)
		if err != nil {
			return client.Condition{}, false, err
		}
		return client.IfValue(v), true, nil
	case cmd.Flags().Changed("if-absent"):
		if !cf.ifAbsent {
			return client.Condition{}, false, errors.New("--if-absent=false is no condition: leave the flag out for an unconditional write")
		}
		return client.IfAbsent(), true, nil
	default:
		if cf.ifVersion == 0 {
			return client.Condition{}, false, errors.New("--if-version must be a commit timestamp above 0 (a key with no value: --if-absent)")
		}
		return client.IfVersion(cf.ifVersion), true, nil
	}
}

// casResult prints a compare-and-set's outcome: as a write's when it
// succeeded, else what the key holds, with exit status 1.
func casResult(p *printer, args []string, r client.CASResult) error {
	if r.Succeeded {
		return writeResult(p, r.WriteResult)
	}
	doc := map[string]any{"succeeded": false, "region": r.Region, "found": r.Found, "version": r.Version}
	held := fmt.Sprintf("is absent (newest version %d)", r.Version)
	if r.Found {
		doc["value"] = p.json(r.Value)
		held = fmt.Sprintf("holds %s (version %d)", p.text(r.Value), r.Version)
	}
	if p.format == "json" {
		_ = p.record("", doc)
		if err := p.flush(); err != nil {
			return err
		}
	}
	return &userError{what: fmt.Sprintf("%q: the condition did not hold, nothing was written: the key %s", args[0], held)}
}

// registerTTL adds --ttl to cmd.
func registerTTL(cmd *cobra.Command, ttl *time.Duration, usage string) {
	cmd.Flags().DurationVar(ttl, "ttl", 0, usage)
}

// ttlOption is the write option --ttl gives (none when it is not set), or
// an error naming a --ttl that is not positive.
func ttlOption(cmd *cobra.Command, ttl time.Duration) ([]client.WriteOption, error) {
	if !cmd.Flags().Changed("ttl") {
		return nil, nil
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("--ttl %v: a time to live must be positive (leave the flag out for a value that never expires)", ttl)
	}
	return []client.WriteOption{client.WithTTL(ttl)}, nil
}
