package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// kvFlags are the flags every kv command shares.
type kvFlags struct {
	addr    string
	timeout time.Duration
	hex     bool
	raw     bool
	output  string
	// reach, when set, is how the command reaches the cluster instead of
	// --addr and the client TLS flags: the seeds, the client's options
	// (its dial options, a dialer), and what to close after (the kubectl
	// plugin's port-forwards).
	reach func(ctx context.Context) (seeds []string, opts client.Options, done func(), err error)
}

func (f *kvFlags) codec() codec { return codec{hex: f.hex, raw: f.raw} }

func (f *kvFlags) printer(cmd *cobra.Command, header ...string) (*printer, error) {
	switch {
	case f.raw && f.hex:
		return nil, errors.New("give --raw (the bytes as they are) or --hex (in hexadecimal), not both")
	case f.raw && f.output != "text":
		return nil, fmt.Errorf("--raw is for the text output; -o %s encodes keys and values itself", f.output)
	}
	return newPrinter(cmd.OutOrStdout(), f.output, f.codec(), header...)
}

// with runs fn with a client of the cluster, within --timeout. The client
// retries what a stale route failed (a region moving, a store restarting)
// until then; errors come back explained.
func (f *kvFlags) with(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel, err := commandContext(cmd.Context(), f.timeout)
	if err != nil {
		return err
	}
	defer cancel()
	reach := f.reach
	if reach == nil {
		reach = f.reachAddr(cmd)
	}
	seeds, opts, done, err := reach(ctx)
	if err != nil {
		return err
	}
	defer done()
	// --timeout bounds ctx (0: nothing but Ctrl-C does, as asked).
	opts.DialTimeout, opts.Retrying = -1, sayFailingOver(cmd.ErrOrStderr())
	c, err := client.New(ctx, seeds, opts)
	if err != nil {
		return explain(err, f.timeout)
	}
	defer c.Close()
	return explain(fn(ctx, c), f.timeout)
}

// reachAddr reaches the cluster at --addr (or the client context's
// address), with the client TLS flags.
func (f *kvFlags) reachAddr(cmd *cobra.Command) func(ctx context.Context) ([]string, client.Options, func(), error) {
	return func(ctx context.Context) ([]string, client.Options, func(), error) {
		if err := useContext(cmd, &f.addr); err != nil {
			return nil, client.Options{}, nil, err
		}
		seeds, err := parseSeeds(f.addr)
		if err != nil {
			return nil, client.Options{}, nil, err
		}
		if err := reachAny(ctx, seeds); err != nil {
			return nil, client.Options{}, nil, err
		}
		dial, err := clientDial(seeds...)
		if err != nil {
			return nil, client.Options{}, nil, err
		}
		return seeds, client.Options{DialOptions: dial}, func() {}, nil
	}
}

func newKVCommand() *cobra.Command {
	f := &kvFlags{}
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Client: put, get, delete and scan keys in a cluster (or one store)",
		Long: `The Go client on the command line. Keys and values are given as arguments
(with --hex, in hexadecimal); put also reads a value from a file
(--value-file FILE) or from standard input (--value-file -, or no VALUE with
input piped). The text output is a line per key, KEY<TAB>VALUE: a key or
value that is not plain printable text (a tab, a newline, other control
characters, bytes that are not UTF-8) or begins with " is printed Go-quoted,
"\x00\xffa\tb", so binary data neither garbles a terminal nor breaks a line;
--raw prints the bytes as they are, --hex in hexadecimal. get KEY prints the
value alone, as its bytes are, when its output is not a terminal (redirected
or piped: no newline added, so get k > FILE gives back what put k
--value-file FILE wrote). -o json prints one JSON object per line, keys and
values in base64 (hexadecimal with --hex); -o table aligns columns.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.addr, "addr", defaultStoreAddr,
		fmt.Sprintf("seed addresses, comma-separated: a store or the cluster's client Service (HOST without :PORT means port %d); requests go to each key's owner", contract.StoreGRPCPort))
	pf.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-command timeout, retries included (0: none; Ctrl-C still stops)")
	pf.BoolVar(&f.hex, "hex", false, "keys and values are hexadecimal, in the arguments and the output")
	pf.BoolVar(&f.raw, "raw", false, "text output: keys and values as their bytes are, not quoted when they are not plain text (get KEY: the value alone, without a newline, on a terminal too)")
	pf.StringVarP(&f.output, "output", "o", "text", "output format: "+strings.Join(outputFormats, ", "))
	addClientTLSFlag(pf)

	admin := func(cmd *cobra.Command, region string, fn func(ctx context.Context, c kvpb.AdminClient) error) error {
		return f.with(cmd, func(ctx context.Context, c *client.Client) error {
			r, err := findRegion(c.Regions(), region)
			if err != nil {
				return err
			}
			// The Admin API acts on the store's own regions: go to the
			// owner, or to the first seed, which forwards.
			target := strings.Split(f.addr, ",")[0]
			if len(r.Owners) > 0 {
				target = r.Owners[0]
			} else if seeds, err := parseSeeds(f.addr); err == nil {
				target = seeds[0]
			}
			dial, err := clientDial(target)
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(target, dial...)
			if err != nil {
				return err
			}
			defer conn.Close()
			return fn(ctx, kvpb.NewAdminClient(conn))
		})
	}
	cmd.AddCommand(newKVPutCommand(f), newKVGetCommand(f), newKVDeleteCommand(f), newKVScanCommand(f),
		newKVTxnCommand(f), newKVBatchCommand(f), newKVRegionsCommand(f), newKVStatusCommand(f), newKVWatchCommand(f))

	flush := &cobra.Command{Use: "flush REGION", Short: "Flush a region's memstore into an SST (Admin API, at the region's owner)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.printer(cmd, "REGION", "FLUSHED")
			if err != nil {
				return err
			}
			return admin(cmd, args[0], func(ctx context.Context, c kvpb.AdminClient) error {
				if _, err := c.Flush(ctx, &kvpb.FlushRequest{Region: args[0]}); err != nil {
					return err
				}
				_ = p.record(fmt.Sprintf("OK flushed %s\n", args[0]), map[string]any{"region": args[0], "flushed": true}, args[0], "yes")
				return p.flush()
			})
		}}
	var minor bool
	var startTimeout time.Duration
	compact := &cobra.Command{Use: "compact REGION", Short: "Compact a region, major unless --minor (Admin API, at the region's owner); runs where the store's offload mode says", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.printer(cmd, "REGION", "INPUTS", "INPUT_BYTES", "OUTPUT", "LOCATION", "NOTE")
			if err != nil {
				return err
			}
			return admin(cmd, args[0], func(ctx context.Context, c kvpb.AdminClient) error {
				r, err := c.Compact(ctx, &kvpb.CompactRequest{Region: args[0], Major: !minor, StartTimeoutMs: startTimeout.Milliseconds()})
				if err != nil {
					return err
				}
				text := fmt.Sprintf("OK %s: nothing to compact\n", args[0])
				if r.Compacted {
					text = fmt.Sprintf("OK %s: %d files (%d bytes) -> %s\n", args[0], len(r.Inputs), r.InputBytes, r.Output)
					if r.Note != "" {
						text += fmt.Sprintf("ran %s: %s\n", r.Location, r.Note)
					}
				}
				doc := map[string]any{"region": args[0], "compacted": r.Compacted, "inputs": r.Inputs, "input_bytes": r.InputBytes,
					"output": r.Output, "location": r.Location, "note": r.Note}
				_ = p.record(text, doc, args[0], fmt.Sprint(len(r.Inputs)), fmt.Sprint(r.InputBytes), r.Output, r.Location, r.Note)
				return p.flush()
			})
		}}
	compact.Flags().DurationVar(&startTimeout, "start-timeout", 0, "with offload Required: give up, saying why, if no worker starts the compaction within this (0: wait)")
	compact.Flags().BoolVar(&minor, "minor", false, "a minor compaction (the exploring policy's selection) instead of a major one")
	cmd.AddCommand(flush, compact)
	return cmd
}

// findRegion is the region named name, or an error listing the regions
// there are.
func findRegion(regions []client.Region, name string) (client.Region, error) {
	var names []string
	for _, r := range regions {
		if r.Name == name {
			return r, nil
		}
		names = append(names, r.Name)
	}
	return client.Region{}, &userError{
		what: fmt.Sprintf("no region %q: the cluster's regions are %s", name, strings.Join(names, ", ")),
		hint: "`bellows kv regions` lists them with their key ranges and owners",
	}
}

func newKVPutCommand(f *kvFlags) *cobra.Command {
	var valueFile string
	var cas casFlags
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Write a value: the argument, --value-file FILE, or standard input (--value-file -, or piped with no VALUE)",
		Long: `Writes VALUE under KEY. With --if-value, --if-absent or --if-version the write
is a compare-and-set: it commits only if the key holds what the flag says,
judged and written with no other write of the key in between. When the
condition does not hold nothing is written, the key's value and version are
named, and the exit status is 1. With --ttl the value expires that long after
its commit: reads from then on find no value (docs/expiry.md).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cond, conditional, err := cas.condition(cmd, f.codec())
			if err != nil {
				return err
			}
			opts, err := ttlOption(cmd, ttl)
			if err != nil {
				return err
			}
			p, err := f.printer(cmd, "REGION", "COMMIT_TS")
			if err != nil {
				return err
			}
			key, err := f.codec().arg("KEY", args[0])
			if err != nil {
				return err
			}
			value, err := putValue(cmd, f.codec(), args[1:], valueFile)
			if err != nil {
				return err
			}
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				if conditional {
					r, err := c.CompareAndSet(ctx, key, cond, value, opts...)
					if err != nil {
						return err
					}
					return casResult(p, args, r)
				}
				r, err := c.Put(ctx, key, value, opts...)
				if err != nil {
					return err
				}
				return writeResult(p, r)
			})
		}}
	cmd.Flags().StringVar(&valueFile, "value-file", "", "read the value from this file (- for standard input), as its bytes are (not hexadecimal with --hex)")
	registerTTL(cmd, &ttl, "the value expires this long after its commit (e.g. 30s, 10m, 24h); reads from then on find no value")
	cas.register(cmd, true)
	return cmd
}

// putValue is put's value: the argument, the file, or standard input when
// it is not a terminal. It is read up to one byte past the limit, so a
// too large value fails before anything is sent and without reading it all.
func putValue(cmd *cobra.Command, c codec, args []string, valueFile string) ([]byte, error) {
	if len(args) == 1 {
		if valueFile != "" {
			return nil, errors.New("give the value either as VALUE or with --value-file, not both")
		}
		return c.arg("VALUE", args[0])
	}
	var r io.Reader
	name := valueFile
	switch valueFile {
	case "":
		in := cmd.InOrStdin()
		if f, ok := in.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				return nil, errors.New("no value: give VALUE, --value-file FILE, or pipe it in (--value-file - reads standard input)")
			}
		}
		r, name = in, "standard input"
	case "-":
		r, name = cmd.InOrStdin(), "standard input"
	default:
		file, err := os.Open(valueFile)
		if err != nil {
			return nil, fmt.Errorf("--value-file: %w", err)
		}
		defer file.Close()
		r = file
	}
	v, err := io.ReadAll(io.LimitReader(r, client.MaxValueBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value from %s: %w", name, err)
	}
	if len(v) > client.MaxValueBytes {
		return nil, explain(fmt.Errorf("%w: %s holds more than the limit, %s (%d bytes, MaxValueBytes)",
			client.ErrValueTooLarge, name, humanize.IBytes(client.MaxValueBytes), client.MaxValueBytes), 0)
	}
	return v, nil
}

func writeResult(p *printer, r client.WriteResult) error {
	_ = p.record(fmt.Sprintf("OK %s ts=%d\n", r.Region, r.CommitTS),
		map[string]any{"region": r.Region, "commit_ts": r.CommitTS}, r.Region, fmt.Sprint(r.CommitTS))
	return p.flush()
}

func newKVGetCommand(f *kvFlags) *cobra.Command {
	var readTS uint64
	cmd := &cobra.Command{Use: "get KEY [KEY...]", Short: "Read a value, or several keys' in one BatchGet (exit status 1 if one is absent)", Args: cobra.MinimumNArgs(1),
		Long: `Reads KEY's value. On a terminal it is printed with a newline after it, Go-quoted
if it is not plain text ("\x00\xff"); otherwise (redirected to a file,
piped) it is written exactly, its bytes and nothing more, as with --raw
(which does that on a terminal too). With several keys, reads them all in one
BatchGet (one call per region, concurrently) and prints each key found as
KEY<TAB>VALUE, in the order given, quoted as kv scan quotes them; a key that
is absent is named on standard error and the exit status is 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := f.printer(cmd, "KEY", "VALUE")
			if err != nil {
				return err
			}
			keys := make([][]byte, len(args))
			for i, a := range args {
				if keys[i], err = f.codec().arg("KEY", a); err != nil {
					return err
				}
			}
			if len(keys) > 1 {
				return f.with(cmd, func(ctx context.Context, c *client.Client) error {
					return batchGet(ctx, c, p, keys, args, readTS)
				})
			}
			key := keys[0]
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				var v []byte
				var version uint64
				var found bool
				var err error
				if readTS != 0 {
					v, found, err = c.GetAt(ctx, key, readTS)
				} else {
					v, version, found, err = c.GetVersion(ctx, key)
				}
				if err != nil {
					return err
				}
				if !found {
					return &userError{what: fmt.Sprintf("%q: not found", args[0])}
				}
				doc := map[string]any{"key": p.json(key), "value": p.json(v)}
				if version != 0 {
					doc["version"] = version // --if-version's argument
				}
				_ = p.record(p.value(v, isTerminal(cmd.OutOrStdout())), doc, p.table(key), p.table(v))
				return p.flush()
			})
		}}
	cmd.Flags().Uint64Var(&readTS, "read-ts", 0, "read the version visible at this timestamp (0: newest)")
	return cmd
}

// batchGet prints the found keys of one BatchGet as KEY<TAB>VALUE and
// fails naming the absent ones.
func batchGet(ctx context.Context, c *client.Client, p *printer, keys [][]byte, args []string, readTS uint64) error {
	var res []client.GetResult
	var err error
	if readTS != 0 {
		res, err = c.BatchGetAt(ctx, keys, readTS)
	} else {
		res, err = c.BatchGet(ctx, keys)
	}
	if err != nil {
		return err
	}
	var absent []string
	for i, r := range res {
		if !r.Found {
			absent = append(absent, fmt.Sprintf("%q", args[i]))
			continue
		}
		_ = p.record(p.text(r.Key)+"\t"+p.text(r.Value)+"\n", map[string]any{"key": p.json(r.Key), "value": p.json(r.Value)}, p.table(r.Key), p.table(r.Value))
	}
	if err := p.flush(); err != nil {
		return err
	}
	if len(absent) > 0 {
		return &userError{what: strings.Join(absent, ", ") + ": not found"}
	}
	return nil
}

func newKVDeleteCommand(f *kvFlags) *cobra.Command {
	var prefix string
	var ranged bool
	var cas casFlags
	cmd := &cobra.Command{Use: "delete KEY | --prefix P | --range START [END]", Aliases: []string{"del"},
		Short: "Delete a key, the keys that begin with --prefix P, or the keys in --range [START, END)",
		Long: `Deletes KEY; with --prefix P, every key that begins with P; with --range START
[END], every key in [START, END) (no END: to the last key, like etcdctl del
--from-key). A range is deleted atomically within one region, one batch of
tombstones at one commit timestamp, as long as its keys fit in one batch
(` + humanize.IBytes(client.MaxBatchBytes) + ` of keys); over several regions or batches it takes one commit
each, in key order, and is not atomic as a whole. With --if-value or
--if-version, KEY is deleted only if it holds what the flag says
(compare-and-set); when it does not, nothing is deleted, the key's value and
version are named, and the exit status is 1.`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := f.codec()
			cond, conditional, err := cas.condition(cmd, c)
			if err != nil {
				return err
			}
			if conditional && (cmd.Flags().Changed("prefix") || ranged) {
				return errors.New("--if-value and --if-version delete one KEY, not a --prefix or --range")
			}
			if cmd.Flags().Changed("prefix") || ranged {
				var start, end []byte
				var err error
				switch {
				case cmd.Flags().Changed("prefix") && ranged:
					return errors.New("give either --prefix P or --range START [END], not both")
				case cmd.Flags().Changed("prefix"):
					if len(args) > 0 {
						return errors.New("--prefix P takes no KEY: it deletes the keys that begin with P")
					}
					if start, err = c.arg("--prefix", prefix); err != nil {
						return err
					}
					end = client.PrefixEnd(start)
				default:
					if len(args) == 0 {
						return errors.New("--range needs START (and END, else to the last key)")
					}
					if start, err = c.arg("START", args[0]); err != nil {
						return err
					}
					if len(args) == 2 {
						if end, err = c.arg("END", args[1]); err != nil {
							return err
						}
					}
					if len(end) > 0 && bytes.Compare(start, end) > 0 {
						return explain(fmt.Errorf("%w: START %q is after END %q, and [START, END) holds no key", client.ErrInvalidRange, start, end), 0)
					}
				}
				p, err := f.printer(cmd, "DELETED", "COMMITS")
				if err != nil {
					return err
				}
				return f.with(cmd, func(ctx context.Context, cl *client.Client) error {
					r, err := cl.DeleteRange(ctx, start, end)
					if err != nil {
						if r.Deleted > 0 {
							fmt.Fprintf(cmd.ErrOrStderr(), "deleted %d keys before the error; run the command again to delete the rest\n", r.Deleted)
						}
						return err
					}
					return deleteRangeResult(p, r)
				})
			}
			if len(args) != 1 {
				return errors.New("give KEY, or --prefix P, or --range START [END]")
			}
			p, err := f.printer(cmd, "REGION", "COMMIT_TS")
			if err != nil {
				return err
			}
			key, err := c.arg("KEY", args[0])
			if err != nil {
				return err
			}
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				if conditional {
					r, err := c.CompareAndDelete(ctx, key, cond)
					if err != nil {
						return err
					}
					return casResult(p, args, r)
				}
				r, err := c.Delete(ctx, key)
				if err != nil {
					return err
				}
				return writeResult(p, r)
			})
		}}
	cmd.Flags().StringVar(&prefix, "prefix", "", "delete every key that begins with this prefix")
	cmd.Flags().BoolVar(&ranged, "range", false, "delete every key in [START, END) (no END: to the last key)")
	cas.register(cmd, false)
	return cmd
}

// deleteRangeResult prints how many keys a DeleteRange deleted and its
// commits (region and timestamp).
func deleteRangeResult(p *printer, r client.DeleteRangeResult) error {
	var commits []string
	var docs []map[string]any
	for _, c := range r.Commits {
		commits = append(commits, fmt.Sprintf("%s ts=%d", c.Region, c.CommitTS))
		docs = append(docs, map[string]any{"region": c.Region, "commit_ts": c.CommitTS})
	}
	text := fmt.Sprintf("OK deleted %d keys\n", r.Deleted)
	switch len(commits) {
	case 0:
	case 1:
		text = fmt.Sprintf("OK deleted %d keys, %s\n", r.Deleted, commits[0])
	default:
		text = fmt.Sprintf("OK deleted %d keys in %d commits (not atomic together): %s\n", r.Deleted, len(commits), strings.Join(commits, ", "))
	}
	_ = p.record(text, map[string]any{"deleted": r.Deleted, "commits": docs}, fmt.Sprint(r.Deleted), strings.Join(commits, ", "))
	return p.flush()
}

func newKVScanCommand(f *kvFlags) *cobra.Command {
	var limit int
	var after, before, prefix string
	var reverse bool
	cmd := &cobra.Command{
		Use:   "scan [START [END]]",
		Short: "List keys in [START, END) as KEY<TAB>VALUE; with --after KEY [END], the keys after KEY; with --prefix P, the keys that begin with P; --reverse: descending",
		Long: `Lists the keys in [START, END) in key order (no START: from the first key; no
END: to the last). --prefix P lists the keys that begin with P (like etcdctl
get --prefix). --reverse lists the same keys in descending order, from END
down, and --limit N then gives the N highest (like etcdctl get
--sort-order=DESCEND); START still comes first and must not be after END.
--before KEY [START] lists the keys below KEY. A scan stopped by --timeout or
Ctrl-C prints, on standard error, the last key it printed and the command
that resumes after it (before it, with --reverse). Each line is KEY<TAB>VALUE;
a key or value that is not plain printable text, or begins with ", is
printed Go-quoted ("\x00\xffa\tb"), so binary data cannot garble a terminal
or split a line; --raw prints the bytes as they are, --hex in hexadecimal,
-o json in base64.`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must be 0 (all) or more", limit)
			}
			p, err := f.printer(cmd, "KEY", "VALUE")
			if err != nil {
				return err
			}
			c := f.codec()
			var start, end []byte
			endArg := ""
			if cmd.Flags().Changed("after") && cmd.Flags().Changed("before") {
				return errors.New("give --after KEY [END] or --before KEY [START], not both")
			}
			if cmd.Flags().Changed("prefix") {
				if len(args) > 0 || cmd.Flags().Changed("after") || cmd.Flags().Changed("before") {
					return errors.New("--prefix P takes no START or END and no --after or --before: it scans the keys that begin with P")
				}
				if start, err = c.arg("--prefix", prefix); err != nil {
					return err
				}
				end = client.PrefixEnd(start)
			} else if cmd.Flags().Changed("after") {
				if len(args) > 1 {
					return errors.New("with --after KEY, give at most END")
				}
				k, err := c.arg("--after", after)
				if err != nil {
					return err
				}
				start = append(k, 0) // the first key after k
				if len(args) == 1 {
					endArg = args[0]
				}
			} else if cmd.Flags().Changed("before") {
				if len(args) > 1 {
					return errors.New("with --before KEY, give at most START")
				}
				if end, err = c.arg("--before", before); err != nil {
					return err
				}
				if len(end) == 0 {
					return errors.New("--before KEY: KEY is empty, and no key is below it")
				}
				if len(args) == 1 {
					if start, err = c.arg("START", args[0]); err != nil {
						return err
					}
				}
			} else if len(args) > 0 {
				if start, err = c.arg("START", args[0]); err != nil {
					return err
				}
				if len(args) > 1 {
					endArg = args[1]
				}
			}
			if endArg != "" {
				if end, err = c.arg("END", endArg); err != nil {
					return err
				}
			}
			if len(end) > 0 && bytes.Compare(start, end) > 0 {
				if reverse {
					return explain(fmt.Errorf("%w: START %q is after END %q, and [START, END) holds no key; --reverse lists the same range from END down, so give the lower key first: %s",
						client.ErrInvalidRange, start, end, reverseCommand(c, end, start)), 0)
				}
				return explain(fmt.Errorf("%w: START %q is after END %q, and [START, END) holds no key", client.ErrInvalidRange, start, end), 0)
			}
			return f.with(cmd, func(ctx context.Context, cl *client.Client) error {
				it := cl.Scan(ctx, start, end, client.ScanOptions{Limit: limit, Reverse: reverse})
				defer it.Close()
				return printScan(cmd.ErrOrStderr(), p, it, scanRange{start: start, end: end, reverse: reverse})
			})
		}}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many keys (0: all; with --reverse, the highest)")
	cmd.Flags().BoolVar(&reverse, "reverse", false, "list the keys in descending order, from END down")
	cmd.Flags().StringVar(&before, "before", "", "end below this key (what a stopped --reverse scan says to resume from)")
	cmd.Flags().StringVar(&after, "after", "", "start after this key (what a stopped scan says to resume from)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "list only the keys that begin with this prefix")
	return cmd
}

// pairs is what printScan reads: a client.Iterator.
type pairs interface {
	Next() bool
	Key() []byte
	Value() []byte
	Err() error
}

// scanRange is what a scan covers, for its resume command.
type scanRange struct {
	start, end []byte
	reverse    bool
}

// printScan prints the pairs; when the scan ends early (the timeout,
// Ctrl-C, a failure) after printing some, it says on stderr where to
// resume, so a long scan need not start over.
func printScan(stderr io.Writer, p *printer, it pairs, r scanRange) error {
	var last []byte
	n := 0
	for it.Next() {
		k, v := it.Key(), it.Value()
		if err := p.record(p.text(k)+"\t"+p.text(v)+"\n", map[string]any{"key": p.json(k), "value": p.json(v)}, p.table(k), p.table(v)); err != nil {
			return err
		}
		last = append(last[:0], k...)
		n++
	}
	if err := p.flush(); err != nil {
		return err
	}
	err := it.Err()
	if err == nil || n == 0 {
		return err
	}
	if r.reverse {
		// END is exclusive: the last key printed is the next scan's end.
		fmt.Fprintf(stderr, "scan stopped after %d keys; resume key (the END to continue below): %q\n", n, last)
	} else {
		fmt.Fprintf(stderr, "scan stopped after %d keys; resume key (the next key to start from): %q\n", n, append(slices.Clone(last), 0))
	}
	fmt.Fprintf(stderr, "resume with: %s\n", resumeCommand(p.codec, last, r))
	return err
}

// reverseCommand is the reverse scan of [start, end), in the arguments'
// encoding or in hexadecimal.
func reverseCommand(c codec, start, end []byte) string {
	sa, ok := c.shellArg(start)
	ea, endOK := c.shellArg(end)
	if !ok || !endOK {
		c = codec{hex: true}
		sa, _ = c.shellArg(start)
		ea, _ = c.shellArg(end)
	}
	s := "bellows kv scan"
	if c.hex {
		s += " --hex"
	}
	return s + " --reverse " + sa + " " + ea
}

// resumeCommand is the scan that continues after last, up to r's end (a
// reverse scan: below last, down to r's start), in the arguments'
// encoding, or in hexadecimal when a key would not survive a shell as
// text.
func resumeCommand(c codec, last []byte, r scanRange) string {
	// The bound that stays: a forward scan's end, a reverse scan's start.
	bound, flag := r.end, " --after "
	if r.reverse {
		bound, flag = r.start, " --reverse --before "
	}
	la, ok := c.shellArg(last)
	ba, boundOK := c.shellArg(bound)
	if !ok || !boundOK {
		c = codec{hex: true}
		la, _ = c.shellArg(last)
		ba, _ = c.shellArg(bound)
	}
	s := "bellows kv scan"
	if c.hex {
		s += " --hex"
	}
	s += flag + la
	if len(bound) > 0 {
		s += " " + ba
	}
	return s
}
