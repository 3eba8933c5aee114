package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryParentCommandRefusesAnUnknownSubcommand walks both command trees
// (bellows, and kubectl-bellows as kubectl runs it): every command that only
// groups others fails on a word that names none of them, naming it, instead
// of printing its help and exiting 0.
func TestEveryParentCommandRefusesAnUnknownSubcommand(t *testing.T) {
	var parents [][]string
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		if c.HasSubCommands() {
			parents = append(parents, path)
		}
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			walk(append(append([]string(nil), path...), sub.Name()), sub)
		}
	}
	walk(nil, NewRootCommand())
	n := len(parents)
	if n < 5 {
		t.Fatalf("found only %d parent commands: %v", n, parents)
	}
	for _, root := range []func() *cobra.Command{NewRootCommand, func() *cobra.Command { return NewKubectlCommand(KubectlPluginName) }} {
		name := root().Name()
		paths := parents
		if name == KubectlPluginName {
			name = "kubectl bellows" // as kubectl runs it
			paths = [][]string{nil}
			for _, p := range parents {
				if len(p) > 1 && p[0] == "kubectl" {
					paths = append(paths, p[1:])
				}
			}
		}
		for _, p := range paths {
			cmd := root()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append(append([]string(nil), p...), "zzbogus"))
			err := cmd.Execute()
			want := `unknown command "zzbogus" for "` + strings.Join(append([]string{name}, p...), " ") + `"`
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s %s zzbogus: err %v, want %s\n%s", name, strings.Join(p, " "), err, want, out.String())
			}
		}
	}
}

func TestAMistypedSubcommandFailsWithSuggestions(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    string
		suggest string
	}{
		{[]string{"kv", "gte"}, `unknown command "gte" for "bellows kv"`, "get"},
		{[]string{"backup", "lst"}, `unknown command "lst" for "bellows backup"`, "list"},
		{[]string{"kubectl", "stats"}, `unknown command "stats" for "bellows kubectl"`, "status"},
	} {
		out, err := runCLI(tc.args...)
		if err == nil {
			t.Errorf("%v: exit 0, want an error\n%s", tc.args, out)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Did you mean this?\n\t"+tc.suggest) {
			t.Errorf("%v: %q, want %q and the suggestion %q", tc.args, err, tc.want, tc.suggest)
		}
	}
	// With no word, a parent command still prints its help and succeeds.
	out, err := runCLI("kv")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("bellows kv: %v\n%s", err, out)
	}
}
