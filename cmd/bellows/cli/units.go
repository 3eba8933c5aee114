package cli

import (
	"fmt"

	"github.com/bellows-kv/bellows/autoscaler"
)

// sizeFlag binds a byte count written with a unit (6GiB, 6GB) or "0".
type sizeFlag struct{ p *int64 }

func (f sizeFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return fmt.Sprint(*f.p)
}
func (f sizeFlag) Type() string { return "size" }
func (f sizeFlag) Set(s string) error {
	if s == "0" {
		*f.p = 0
		return nil
	}
	v, err := autoscaler.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.p = int64(v)
	return nil
}

// rateFlag binds a byte rate (8MB/s, 1GiB/min) or "0".
type rateFlag struct{ p *float64 }

func (f rateFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return fmt.Sprint(*f.p)
}
func (f rateFlag) Type() string { return "rate" }
func (f rateFlag) Set(s string) error {
	if s == "0" {
		*f.p = 0
		return nil
	}
	v, err := autoscaler.ParseByteRate(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}
