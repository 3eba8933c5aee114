package client

import (
	"bytes"
	"testing"
)

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ prefix, want []byte }{
		{nil, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("user/"), []byte("user0")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xfe\xff\xff"), []byte("a\xff")},
		{[]byte("\xff"), nil},
		{[]byte("\xff\xff\xff"), nil},
		{[]byte{0}, []byte{1}},
	} {
		got := PrefixEnd(c.prefix)
		if !bytes.Equal(got, c.want) || (c.want == nil) != (got == nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.prefix, got, c.want)
		}
		// Every key with the prefix is below the end; the end itself
		// and every key past it do not have the prefix.
		if got != nil {
			if k := append(bytes.Clone(c.prefix), 0xff, 0xff); bytes.Compare(k, got) >= 0 {
				t.Errorf("PrefixEnd(%q) = %q is not above %q", c.prefix, got, k)
			}
			if bytes.HasPrefix(got, c.prefix) {
				t.Errorf("PrefixEnd(%q) = %q has the prefix", c.prefix, got)
			}
		}
	}
	// The prefix is not modified.
	p := []byte("ab")
	PrefixEnd(p)
	if string(p) != "ab" {
		t.Errorf("PrefixEnd modified its argument: %q", p)
	}
}
