// Package cli wires the bellows subcommands. It holds flag parsing and
// wiring only; the work lives in the packages it calls.
package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/internal/version"
)

// NewRootCommand returns the bellows command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "bellows",
		Short:         "Bellows: a log-structured key-value store with offloaded compaction",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newVersionCommand())
	root.AddCommand(newOperatorCommand())
	root.AddCommand(newAutoscalerCommand())
	root.AddCommand(newStoreCommand())
	root.AddCommand(newCompactorCommand())
	root.AddCommand(newLocalCommand())
	root.AddCommand(newKVCommand())
	root.AddCommand(newBackupCommand())
	root.AddCommand(newRestoreCommand())
	root.AddCommand(newChangefeedCommand())
	root.AddCommand(NewKubectlCommand("kubectl"))
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command of the tree that only groups
// others (kv, backup...) fail on an argument that names none of them, as
// cobra does for the root only: `bellows kv gte` would otherwise print kv's
// help and exit 0, as if it had worked. With no argument, it prints its
// help, as before.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = unknownSubcommand
		cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, c := range cmd.Commands() {
		refuseUnknownSubcommands(c)
	}
}

// unknownSubcommand is cobra's error for an unknown command at the root,
// with its suggestions, for a command of subcommands at any depth.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return fmt.Errorf("%s\nRun '%s --help' for usage", msg, cmd.CommandPath())
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the bellows version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "bellows", version.Version)
			return err
		},
	}
}
