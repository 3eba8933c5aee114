// Package cli wires the bellows subcommands. It holds flag parsing and
// wiring only; the work lives in the packages it calls.
package cli

import (
	"fmt"

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
	root.AddCommand(NewKubectlCommand("kubectl"))
	return root
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
