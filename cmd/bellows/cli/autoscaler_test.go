package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func runCLI(args ...string) (string, error) {
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

var paperFlags = []string{"autoscaler", "model", "--compact-rate", "20MB/s", "--transfer-rate", "8MB/s", "--cache", "6GB",
	"--compaction-size", "4GB", "--compactions-per-region", "1/h", "--interval", "1h", "--regions", "10"}

func TestAutoscalerModelPaperExample(t *testing.T) {
	out, err := runCLI(paperFlags...)
	if err != nil {
		t.Fatal(err, out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got["workers"] != 2.0 || got["D"] != 700.0 || got["l"] != 1.0 || got["regionsPerWorker"] != 5.0 {
		t.Fatalf("paper example: %s", out)
	}
	if _, ok := got["h"]; !ok {
		t.Fatalf("no h: %s", out)
	}
}

// In a mode that streams nothing back (Offload: the store reads the output
// from the bucket), D = b/c = 200 s and h = 18: one worker serves the
// example's 10 regions, and w is not needed.
func TestAutoscalerModelWithoutTransfer(t *testing.T) {
	args := []string{"autoscaler", "model", "--compact-rate", "20MB/s", "--cache", "6GB",
		"--compaction-size", "4GB", "--compactions-per-region", "1/h", "--regions", "10", "--warmup-mode", "Offload"}
	out, err := runCLI(args...)
	if err != nil {
		t.Fatal(err, out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got["workers"] != 1.0 || got["D"] != 200.0 {
		t.Fatalf("without transfer: %s", out)
	}
	if _, err := runCLI(append(args[:len(args)-1], "Incremental")...); err == nil || !strings.Contains(err.Error(), "--transfer-rate") {
		t.Fatalf("Incremental without --transfer-rate: want an error naming it, got %v", err)
	}
}

func TestAutoscalerModelErrors(t *testing.T) {
	with := func(flag, value string) []string {
		args := append([]string(nil), paperFlags...)
		for i := range args {
			if args[i] == flag {
				args[i+1] = value
			}
		}
		return args
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{with("--compact-rate", "20MB"), "--compact-rate"},
		{with("--cache", "six gigs"), "--cache"},
		{with("--compactions-per-region", "1/fortnight"), "--compactions-per-region"},
		{with("--interval", "-1h"), "--interval"},
		{append(append([]string(nil), paperFlags...), "--warmup-mode", "Lukewarm"), "--warmup-mode"},
		{with("--compaction-size", "7GB"), "infeasible"},
		{with("--compactions-per-region", "10/h"), "⌊h/T⌋ = 0"},
	} {
		_, err := runCLI(tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want an error containing %q, got %v", tc.args, tc.want, err)
		}
	}
}
