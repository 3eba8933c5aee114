// Package report writes a benchmark's results the way every benchmark here
// publishes them: NAME.json (the numbers, indented) and NAME.md (the
// report a reader reads) side by side in one directory.
package report

import (
	"encoding/json"
	"os"
	"path/filepath"
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
