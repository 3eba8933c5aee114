package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/client"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

func newKVCommand() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{Use: "kv", Short: "Client: put, get, delete and scan keys in a cluster (or one store)"}
	cmd.PersistentFlags().StringVar(&addr, "addr", "127.0.0.1:7400",
		"seed addresses, comma-separated: a store or the cluster's client Service; requests go to each key's owner")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 10*time.Second, "per-command timeout, retries included")
	// with runs f with a client of the cluster, within the command's
	// timeout. The client retries what a stale route failed (a region
	// moving, a store restarting) until the timeout.
	with := func(cmd *cobra.Command, f func(ctx context.Context, c *client.Client) error) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		c, err := client.New(ctx, strings.Split(addr, ","), client.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		return f(ctx, c)
	}
	// admin runs f with an Admin client of the store serving region (the
	// Admin API acts on the store's own regions), or of the first seed when
	// no owner is known.
	admin := func(cmd *cobra.Command, region string, f func(ctx context.Context, c kvpb.AdminClient) error) error {
		return with(cmd, func(ctx context.Context, c *client.Client) error {
			target := strings.Split(addr, ",")[0]
			for _, r := range c.Regions() {
				if r.Name == region && len(r.Owners) > 0 {
					target = r.Owners[0]
				}
			}
			conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer conn.Close()
			return f(ctx, kvpb.NewAdminClient(conn))
		})
	}
	put := &cobra.Command{Use: "put KEY VALUE", Short: "Write a value", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Put(ctx, []byte(args[0]), []byte(args[1]))
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "OK %s ts=%d\n", r.Region, r.CommitTS)
				}
				return err
			})
		}}
	var readTS uint64
	get := &cobra.Command{Use: "get KEY", Short: "Read a value (exit status 1 if absent)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				var v []byte
				var found bool
				var err error
				if readTS != 0 {
					v, found, err = c.GetAt(ctx, []byte(args[0]), readTS)
				} else {
					v, found, err = c.Get(ctx, []byte(args[0]))
				}
				if err != nil {
					return err
				}
				if !found {
					return fmt.Errorf("%q: not found", args[0])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", v)
				return nil
			})
		}}
	get.Flags().Uint64Var(&readTS, "read-ts", 0, "read the version visible at this timestamp (0: newest)")
	del := &cobra.Command{Use: "delete KEY", Short: "Delete a key", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Delete(ctx, []byte(args[0]))
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "OK %s ts=%d\n", r.Region, r.CommitTS)
				}
				return err
			})
		}}
	var limit int
	scan := &cobra.Command{Use: "scan [START [END]]", Short: "List keys in [START, END) as KEY<TAB>VALUE", Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must be 0 (all) or more", limit)
			}
			var start, end []byte
			if len(args) > 0 {
				start = []byte(args[0])
			}
			if len(args) > 1 {
				end = []byte(args[1])
			}
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				it := c.Scan(ctx, start, end, client.ScanOptions{Limit: limit})
				defer it.Close()
				for it.Next() {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", it.Key(), it.Value())
				}
				return it.Err()
			})
		}}
	scan.Flags().IntVar(&limit, "limit", 0, "at most this many keys (0: all)")
	regions := &cobra.Command{Use: "regions", Short: "List the cluster's regions, key ranges and owners", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, c *client.Client) error {
				for _, g := range c.Regions() {
					owners := strings.Join(g.Owners, ",")
					if owners == "" {
						owners = "(through the seeds)"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t[%q, %q)\t%s\n", g.Name, g.Start, g.End, owners)
				}
				return nil
			})
		}}
	flush := &cobra.Command{Use: "flush REGION", Short: "Flush a region's memstore into an SST (Admin API, at the region's owner)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, args[0], func(ctx context.Context, c kvpb.AdminClient) error {
				if _, err := c.Flush(ctx, &kvpb.FlushRequest{Region: args[0]}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK flushed %s\n", args[0])
				return nil
			})
		}}
	var minor bool
	var startTimeout time.Duration
	compact := &cobra.Command{Use: "compact REGION", Short: "Compact a region, major unless --minor (Admin API, at the region's owner); runs where the store's offload mode says", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, args[0], func(ctx context.Context, c kvpb.AdminClient) error {
				r, err := c.Compact(ctx, &kvpb.CompactRequest{Region: args[0], Major: !minor, StartTimeoutMs: startTimeout.Milliseconds()})
				if err != nil {
					return err
				}
				if !r.Compacted {
					fmt.Fprintf(cmd.OutOrStdout(), "OK %s: nothing to compact\n", args[0])
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK %s: %d files (%d bytes) -> %s\n", args[0], len(r.Inputs), r.InputBytes, r.Output)
				if r.Note != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "ran %s: %s\n", r.Location, r.Note)
				}
				return nil
			})
		}}
	compact.Flags().DurationVar(&startTimeout, "start-timeout", 0, "with offload Required: give up, saying why, if no worker starts the compaction within this (0: wait)")
	compact.Flags().BoolVar(&minor, "minor", false, "a minor compaction (the exploring policy's selection) instead of a major one")
	cmd.AddCommand(put, get, del, scan, newKVTxnCommand(with), regions, flush, compact)
	return cmd
}
