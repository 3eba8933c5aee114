package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/client"
)

// txnOp is one operation of `bellows kv txn`.
type txnOp struct {
	verb       string // get, put, delete, scan
	key, value string // scan: START and END
}

// decode is op's key and value as bytes (--hex: from hexadecimal).
func (op txnOp) decode(c codec) (key, value []byte, err error) {
	if op.verb == "scan" {
		if key, err = c.arg("scan START", op.key); err == nil {
			value, err = c.arg("scan END", op.value)
		}
		if err == nil && len(value) > 0 && bytes.Compare(key, value) > 0 {
			err = fmt.Errorf("%w: scan START %q is after END %q", client.ErrInvalidRange, key, value)
		}
		return key, value, err
	}
	if key, err = c.arg(op.verb+" KEY", op.key); err == nil && op.verb == "put" {
		value, err = c.arg("put VALUE", op.value)
	}
	return key, value, err
}

// parseTxnOps reads `get KEY`, `put KEY VALUE`, `delete KEY` and `scan
// START END` in order.
func parseTxnOps(args []string) ([]txnOp, error) {
	var ops []txnOp
	for i := 0; i < len(args); {
		verb := args[i]
		need := map[string]int{"get": 1, "put": 2, "delete": 1, "scan": 2}[verb]
		if need == 0 {
			return nil, fmt.Errorf("argument %d: %q is not an operation (want get KEY, put KEY VALUE, delete KEY or scan START END)", i+1, verb)
		}
		if i+need >= len(args) {
			return nil, fmt.Errorf("argument %d: %s needs %d more argument(s)", i+1, verb, need)
		}
		op := txnOp{verb: verb, key: args[i+1]}
		if need == 2 {
			op.value = args[i+2]
		}
		ops = append(ops, op)
		i += 1 + need
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("no operations: give get KEY, put KEY VALUE, delete KEY or scan START END, one or more")
	}
	return ops, nil
}

// runTxnOps runs ops in t, printing each read (and each pair a scan
// reads) as KEY<TAB>VALUE.
func runTxnOps(ctx context.Context, t *client.Txn, ops []txnOp, c codec, out io.Writer) error {
	for _, op := range ops {
		key, value, err := op.decode(c)
		if err != nil {
			return err
		}
		switch op.verb {
		case "get":
			v, found, err := t.Get(ctx, key)
			if err != nil {
				return err
			}
			if found {
				fmt.Fprintf(out, "%s\t%s\n", c.text(key), c.text(v))
			} else {
				fmt.Fprintf(out, "%s\t(absent)\n", c.text(key))
			}
		case "put":
			t.Put(key, value)
		case "delete":
			t.Delete(key)
		case "scan":
			it := t.Scan(ctx, key, value, client.ScanOptions{})
			for it.Next() {
				fmt.Fprintf(out, "%s\t%s\n", c.text(it.Key()), c.text(it.Value()))
			}
			it.Close()
			if err := it.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

func newKVTxnCommand(f *kvFlags) *cobra.Command {
	var retry, serializable bool
	cmd := &cobra.Command{
		Use:   "txn OPERATION...",
		Short: "Run get KEY, put KEY VALUE, delete KEY and scan START END in one transaction (snapshot isolation, or --serializable), in any regions, and commit it",
		Long: `Runs the operations in order in one transaction: reads see the snapshot at its
start (and its own writes; scan START END lists [START, END), an empty END
meaning to the last key), writes commit together or not at all, in whatever
regions they fall. A conflict (another write of one of its keys committed after the
start) aborts it, naming the key; --retry runs it again from a new snapshot instead.
With --serializable it also aborts if a key it read, or a key in a range it
scanned, was written after its start (no write skew, no phantoms).

  bellows kv txn get a put a 2 put b 3
  bellows kv txn --serializable get on-call/alice get on-call/bob put on-call/alice off`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.output != "text" {
				return fmt.Errorf("-o %s: kv txn prints only text", f.output)
			}
			ops, err := parseTxnOps(args)
			if err != nil {
				return err
			}
			for _, op := range ops {
				if _, _, err := op.decode(f.codec()); err != nil {
					return err
				}
			}
			var isolation []client.TxnOption
			if serializable {
				isolation = append(isolation, client.Serializable())
			}
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				out := cmd.OutOrStdout()
				if retry {
					res, err := c.RunTxn(ctx, func(ctx context.Context, t *client.Txn) error { return runTxnOps(ctx, t, ops, f.codec(), out) }, isolation...)
					if err == nil {
						fmt.Fprintf(out, "COMMITTED %s ts=%d\n", res.Region, res.CommitTS)
					}
					return err
				}
				t, err := c.Begin(ctx, isolation...)
				if err != nil {
					return err
				}
				if err := runTxnOps(ctx, t, ops, f.codec(), out); err != nil {
					return err
				}
				res, err := t.Commit(ctx)
				if err != nil {
					return err
				}
				if res.CommitTS == 0 {
					fmt.Fprintf(out, "READ-ONLY ts=%d\n", t.StartTS())
				} else {
					fmt.Fprintf(out, "COMMITTED %s ts=%d\n", res.Region, res.CommitTS)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&retry, "retry", false, "on a conflict, run the transaction again from a new snapshot until it commits or --timeout")
	cmd.Flags().BoolVar(&serializable, "serializable", false, "serializable isolation: also abort if a key read or a range scanned was written after the start (no write skew)")
	return cmd
}

func newKVBatchCommand(f *kvFlags) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "batch OPERATION...",
		Short: "Write put KEY VALUE and delete KEY operations atomically, at one commit timestamp, in any regions",
		Long: `Writes the operations together, all or none, at one commit timestamp, wherever
their keys fall: in one region's commit path when they are all in one region,
else across the regions (two-phase commit, coordinated by the store of the
first key's region). A batch reads nothing and never aborts; kv txn reads and
writes.

  bellows kv batch put a 1 put z 2 delete m`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := parseTxnOps(args)
			if err != nil {
				return err
			}
			if _, err := ttlOption(cmd, ttl); err != nil {
				return err
			}
			muts := make([]client.Mutation, len(ops))
			for i, op := range ops {
				if op.verb != "put" && op.verb != "delete" {
					return fmt.Errorf("%s: a batch only writes (put KEY VALUE, delete KEY); kv txn reads and writes", op.verb)
				}
				key, value, err := op.decode(f.codec())
				if err != nil {
					return err
				}
				muts[i] = client.Mutation{Key: key, Value: value, Delete: op.verb == "delete"}
				if op.verb == "put" {
					muts[i].TTL = ttl
				}
			}
			p, err := f.printer(cmd, "REGION", "COMMIT_TS")
			if err != nil {
				return err
			}
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Batch(ctx, muts)
				if err != nil {
					return err
				}
				return writeResult(p, r)
			})
		}}
	registerTTL(cmd, &ttl, "every put of the batch expires this long after its commit (e.g. 30s, 10m, 24h)")
	return cmd
}
