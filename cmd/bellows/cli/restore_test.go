package cli

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRestoreSaysWhatToDoPastTheArchiveAndCleansUp: a restore to a time
// past the archive's end (as "now" is on an idle store) is refused saying
// where the archive ends and what to do, and leaves no target directory;
// --time latest restores everything the archive holds. backup prune and
// window say what they did in plain words.
func TestRestoreSaysWhatToDoPastTheArchiveAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	addr := startStoreIn(t, dir)
	bucket := filepath.Join(dir, "bucket")
	kv(t, addr, "put", "a", "1")
	for i := range 2 {
		if out, err := runCLI("backup", "create", "--addr", addr, "--tls-dir", "", "--bucket", bucket); err != nil {
			t.Fatalf("backup create: %v\n%s", err, out)
		}
		if i == 0 {
			time.Sleep(1100 * time.Millisecond) // the IDs name the second
		}
	}
	kv(t, addr, "put", "b", "2")

	target := filepath.Join(dir, "restored", "bucket")
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	out, err := runCLI("restore", "--from", bucket, "--time", future, "--to", target)
	if err == nil || !regexp.MustCompile(`--time \S+ is past what the archive holds: it ends at \S+ \(region region-\d+'s WAL archive ends there`).MatchString(err.Error()) ||
		!strings.Contains(err.Error(), "give --time latest") {
		t.Errorf("restore to an hour from now: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "restored")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed restore left the directory it made: %v", err)
	}
	// A directory that was there before stays.
	existing := filepath.Join(dir, "mine")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI("restore", "--from", bucket, "--time", future, "--to", existing); err == nil {
		t.Error("restore past the archive into an existing directory succeeded")
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("a failed restore removed a directory it did not make: %v", err)
	}

	out, err = runCLI("restore", "--from", bucket, "--time", "latest", "--to", target)
	if err != nil || !strings.HasPrefix(out, "OK restored the state at ") {
		t.Fatalf("restore --time latest: %v\n%s", err, out)
	}

	out, err = runCLI("backup", "window", "--bucket", bucket)
	if err != nil || !strings.HasPrefix(out, "a restore can reach ") || strings.Contains(out, "frontier") || !strings.Contains(out, "2 backups (bellows backup list)") {
		t.Errorf("backup window: %v\n%s", err, out)
	}
	out, err = runCLI("backup", "prune", "--bucket", bucket, "--keep-last", "1")
	if err != nil || !regexp.MustCompile(`^OK deleted 1 backup \(backup-\S+\), and \d+ copied files? no remaining backup uses; 1 backup left\n$`).MatchString(out) {
		t.Errorf("backup prune: %v\n%q", err, out)
	}
	out, err = runCLI("backup", "prune", "--bucket", bucket, "--keep-last", "1")
	if err != nil || out != "OK deleted 0 backups: the policy keeps the only one\n" {
		t.Errorf("backup prune with nothing to prune: %v\n%q", err, out)
	}
	if _, err := runCLI("backup", "prune", "--bucket", bucket); err == nil || !strings.Contains(err.Error(), "give --keep-last N") {
		t.Errorf("backup prune without a policy: %v", err)
	}
}
