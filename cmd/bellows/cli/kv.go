package cli

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// withRequestID gives a write a fresh idempotency key, so a store that
// retries it internally (forwarding it to the region's owner) does not
// apply it twice. The CLI itself never retries.
func withRequestID(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, server.RequestIDHeader, rand.Text())
}

func newKVCommand() *cobra.Command {
	var addr string
	var timeout time.Duration
	cmd := &cobra.Command{Use: "kv", Short: "Client: put, get, delete and scan keys on a store"}
	cmd.PersistentFlags().StringVar(&addr, "addr", "127.0.0.1:7400", "store gRPC address")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 10*time.Second, "per-command timeout")
	// dial connects to the store and runs f within the command's timeout.
	dial := func(cmd *cobra.Command, f func(ctx context.Context, conn *grpc.ClientConn) error) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		return f(ctx, conn)
	}
	// with runs f with a KV client, admin with an Admin client.
	with := func(cmd *cobra.Command, f func(ctx context.Context, c kvpb.KVClient) error) error {
		return dial(cmd, func(ctx context.Context, conn *grpc.ClientConn) error { return f(ctx, kvpb.NewKVClient(conn)) })
	}
	admin := func(cmd *cobra.Command, f func(ctx context.Context, c kvpb.AdminClient) error) error {
		return dial(cmd, func(ctx context.Context, conn *grpc.ClientConn) error { return f(ctx, kvpb.NewAdminClient(conn)) })
	}
	put := &cobra.Command{Use: "put KEY VALUE", Short: "Write a value", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c kvpb.KVClient) error {
				r, err := c.Put(withRequestID(ctx), &kvpb.PutRequest{Key: []byte(args[0]), Value: []byte(args[1])})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "OK %s ts=%d\n", r.Region, r.CommitTs)
				}
				return err
			})
		}}
	var readTS uint64
	get := &cobra.Command{Use: "get KEY", Short: "Read a value (exit status 1 if absent)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c kvpb.KVClient) error {
				req := &kvpb.GetRequest{Key: []byte(args[0])}
				if readTS != 0 {
					req.ReadTs = &readTS
				}
				r, err := c.Get(ctx, req)
				if err != nil {
					return err
				}
				if !r.Found {
					return fmt.Errorf("%q: not found", args[0])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", r.Value)
				return nil
			})
		}}
	get.Flags().Uint64Var(&readTS, "read-ts", 0, "read the version visible at this timestamp (0: newest)")
	del := &cobra.Command{Use: "delete KEY", Short: "Delete a key", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return with(cmd, func(ctx context.Context, c kvpb.KVClient) error {
				r, err := c.Delete(withRequestID(ctx), &kvpb.DeleteRequest{Key: []byte(args[0])})
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "OK %s ts=%d\n", r.Region, r.CommitTs)
				}
				return err
			})
		}}
	var limit uint32
	scan := &cobra.Command{Use: "scan [START [END]]", Short: "List keys in [START, END) as KEY<TAB>VALUE", Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &kvpb.ScanRequest{Limit: limit}
			if len(args) > 0 {
				req.Start = []byte(args[0])
			}
			if len(args) > 1 {
				req.End = []byte(args[1])
			}
			return with(cmd, func(ctx context.Context, c kvpb.KVClient) error {
				s, err := c.Scan(ctx, req)
				if err != nil {
					return err
				}
				for {
					r, err := s.Recv()
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					for _, p := range r.Pairs {
						fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", p.Key, p.Value)
					}
				}
			})
		}}
	scan.Flags().Uint32Var(&limit, "limit", 0, "at most this many keys (0: all)")
	regions := &cobra.Command{Use: "regions", Short: "List the store's regions and key ranges", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return with(cmd, func(ctx context.Context, c kvpb.KVClient) error {
				r, err := c.Regions(ctx, &kvpb.RegionsRequest{})
				if err != nil {
					return err
				}
				for _, g := range r.Regions {
					fmt.Fprintf(cmd.OutOrStdout(), "%s\t[%q, %q)\tssts=%d\n", g.Name, g.Start, g.End, g.SstFiles)
				}
				return nil
			})
		}}
	flush := &cobra.Command{Use: "flush REGION", Short: "Flush a region's memstore into an SST (Admin API)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, c kvpb.AdminClient) error {
				if _, err := c.Flush(ctx, &kvpb.FlushRequest{Region: args[0]}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK flushed %s\n", args[0])
				return nil
			})
		}}
	var minor bool
	var startTimeout time.Duration
	compact := &cobra.Command{Use: "compact REGION", Short: "Compact a region, major unless --minor (Admin API); runs where the store's offload mode says", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, c kvpb.AdminClient) error {
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
	cmd.AddCommand(put, get, del, scan, regions, flush, compact)
	return cmd
}
