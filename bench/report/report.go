// Package report writes a benchmark's results the way every benchmark here
// publishes them: NAME.json (the numbers, indented) and NAME.md (the
// report a reader reads) side by side in one directory.
package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
)

// Write writes v as dir/name.json and markdown as dir/name.md, creating dir.
func Write(dir, name string, v any, markdown string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(markdown), 0o644)
}

// Median is the middle of v (the upper one of an even count; 0 for none):
// what every report here states per setting, beside the runs' spread.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
