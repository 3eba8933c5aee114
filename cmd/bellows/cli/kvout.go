package cli

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// Output formats of `bellows kv -o`. text is for people and pipes (a line
// per record, tab-separated, a key or value that is not plain text quoted),
// json for programs (one object per line, so a long scan streams), table
// for people (aligned columns, bytes escaped).
var outputFormats = []string{"text", "json", "table"}

// codec is how keys and values cross the command line: --hex means both
// the arguments and the output are hexadecimal, so any bytes can be given
// and shown without garbling a terminal; --raw, that the text format
// writes them as their bytes are, unquoted.
type codec struct{ hex, raw bool }

// arg decodes a key or value given as an argument; what names it in errors.
func (c codec) arg(what, s string) ([]byte, error) {
	if !c.hex {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not hexadecimal (--hex): %v", what, s, err)
	}
	return b, nil
}

// text is b as a field of the text format's lines: hexadecimal with
// --hex, its bytes with --raw; else as it is when it is plain text, and
// Go-quoted ("a\tb", "\x00\xff") when it holds anything else (a control
// character such as a tab or newline, bytes that are not UTF-8) or begins
// with a double quote. So a binary value neither garbles a terminal nor
// splits its line, and a field that begins with " is the quoted one
// (strconv.Unquote gives its bytes back).
func (c codec) text(b []byte) string {
	switch {
	case c.hex:
		return hex.EncodeToString(b)
	case c.raw || plainText(b):
		return string(b)
	}
	return strconv.Quote(string(b))
}

// plainText: b is printable UTF-8 (spaces included; no tab, newline or
// other control character) and does not begin with a double quote.
func plainText(b []byte) bool {
	if len(b) > 0 && b[0] == '"' {
		return false
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 || !strconv.IsPrint(r) {
			return false
		}
		b = b[n:]
	}
	return true
}

// isTerminal reports whether w is a terminal (a character device: a
// terminal, or /dev/null, which reads nothing either way).
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// value is a value printed alone (kv get KEY) in the text format: its
// bytes exactly, unless it goes to a terminal without --raw (then as a
// field of a line, and a newline) or is hexadecimal (a line).
func (c codec) value(v []byte, terminal bool) string {
	if c.hex || terminal && !c.raw {
		return c.text(v) + "\n"
	}
	return string(v)
}

// json is b in a JSON document: base64 (as etcdctl -w json), or hex.
func (c codec) json(b []byte) string {
	if c.hex {
		return hex.EncodeToString(b)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// table is b in a table cell: printable text as it is, anything else
// escaped as in a Go string, so a cell is one line.
func (c codec) table(b []byte) string {
	if c.hex {
		return hex.EncodeToString(b)
	}
	q := strconv.Quote(string(b))
	return q[1 : len(q)-1]
}

// arg renders b so that codec parses it back from a command line: for the
// resume hint of a scan. A key that is not printable needs --hex.
func (c codec) shellArg(b []byte) (string, bool) {
	if c.hex {
		return hex.EncodeToString(b), true
	}
	s := string(b)
	if strconv.Quote(s) != `"`+s+`"` || strings.ContainsAny(s, "'") {
		return "", false
	}
	return "'" + s + "'", true
}

// printer writes a command's records in the chosen format.
type printer struct {
	codec
	format  string
	w       io.Writer
	tw      *tabwriter.Writer
	header  []string
	printed bool
}

func newPrinter(w io.Writer, format string, c codec, header ...string) (*printer, error) {
	if !slices.Contains(outputFormats, format) {
		return nil, fmt.Errorf("-o %q: want one of %s", format, strings.Join(outputFormats, ", "))
	}
	p := &printer{codec: c, format: format, w: w, header: header}
	if format == "table" {
		p.tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	}
	return p, nil
}

// record prints one record: text as given for the text format, doc as a
// JSON object, cells as a table row under the header.
func (p *printer) record(text string, doc any, cells ...string) error {
	switch p.format {
	case "json":
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	case "table":
		if !p.printed && len(p.header) > 0 {
			fmt.Fprintln(p.tw, strings.Join(p.header, "\t"))
		}
		p.printed = true
		_, err := fmt.Fprintln(p.tw, strings.Join(cells, "\t"))
		return err
	default:
		_, err := io.WriteString(p.w, text)
		return err
	}
}

// flush ends the output (a table is aligned only once all rows are in).
func (p *printer) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}
