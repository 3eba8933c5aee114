package main

import (
	"strings"
)

// Markdown helpers for table cells: GitHub ends a cell at an unescaped |,
// also inside a code span, and takes <name> outside code spans for an HTML
// tag (and drops it).

// code is s as a code span in a table cell.
func code(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", `\|`)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}

// codeList is each item as a code span, comma-separated.
func codeList(items []string) string {
	q := make([]string, 0, len(items))
	for _, i := range items {
		q = append(q, code(i))
	}
	return strings.Join(q, ", ")
}

// text is prose (which may hold `code spans`) for a table cell: paragraphs
// (blank-line separated) joined with <br>, lines within one joined with a
// space, | escaped, < outside code spans as &lt;.
func text(s string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			paras = append(paras, escapeProse(p))
		}
	}
	return strings.Join(paras, "<br>")
}

func escapeProse(s string) string {
	var b strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
			b.WriteRune(r)
		case r == '|':
			b.WriteString(`\|`)
		case r == '<' && !inCode:
			b.WriteString("&lt;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchor is the id GitHub gives a heading: lowercase, letters, digits,
// spaces (as -), - and _ kept, the rest dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
