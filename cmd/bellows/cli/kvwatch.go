package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/client"
)

func newKVWatchCommand(f *kvFlags) *cobra.Command {
	var prefix string
	var afterTS uint64
	var count int
	var progress bool
	cmd := &cobra.Command{
		Use:   "watch [START [END]]",
		Short: "Print every change committed to [START, END) (or --prefix P) as it happens: TS<TAB>put<TAB>KEY<TAB>VALUE or TS<TAB>delete<TAB>KEY",
		Long: `Follows the changes committed to the keys of [START, END) (no START: from the
first key; no END: to the last; --prefix P: the keys that begin with P) after
--after-ts (0: every change the cluster retains), across regions and through
their splits, merges, moves and failovers (docs/watch.md). Changes come in
commit-timestamp order, each once, a transaction's at its commit timestamp.
Each line is TS<TAB>put<TAB>KEY<TAB>VALUE or TS<TAB>delete<TAB>KEY (keys and
values printed as by scan: --hex, --raw; -o json gives commit_ts, type, key,
value and expiry_ts). --progress also prints TS<TAB>resolved whenever every
change at or below TS has been printed. It runs until Ctrl-C, --timeout (none
unless given) or --count changes, then says on standard error the timestamp
to resume from with --after-ts.`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 0 {
				return fmt.Errorf("--count %d: must be 0 (no limit) or more", count)
			}
			if !cmd.Flags().Changed("timeout") {
				f.timeout = 0 // a watch runs until stopped
			}
			p, err := f.printer(cmd, "TS", "TYPE", "KEY", "VALUE")
			if err != nil {
				return err
			}
			c := f.codec()
			var start, end []byte
			if cmd.Flags().Changed("prefix") {
				if len(args) > 0 {
					return errors.New("--prefix P takes no START or END: it watches the keys that begin with P")
				}
				if start, err = c.arg("--prefix", prefix); err != nil {
					return err
				}
				end = client.PrefixEnd(start)
			} else {
				if len(args) > 0 {
					if start, err = c.arg("START", args[0]); err != nil {
						return err
					}
				}
				if len(args) > 1 {
					if end, err = c.arg("END", args[1]); err != nil {
						return err
					}
				}
			}
			return f.with(cmd, func(ctx context.Context, cl *client.Client) error {
				w := cl.Watch(ctx, start, end, client.WatchOptions{AfterTS: afterTS})
				defer w.Close()
				mark, n := afterTS, 0
				for (count == 0 || n < count) && w.Next() {
					u := w.Update()
					for _, e := range u.Events {
						ts := strconv.FormatUint(e.CommitTS, 10)
						doc := map[string]any{"commit_ts": e.CommitTS, "type": "put", "key": p.json(e.Key), "value": p.json(e.Value)}
						text := ts + "\tput\t" + p.text(e.Key) + "\t" + p.text(e.Value) + "\n"
						cells := []string{ts, "put", p.table(e.Key), p.table(e.Value)}
						if e.Delete {
							doc = map[string]any{"commit_ts": e.CommitTS, "type": "delete", "key": p.json(e.Key)}
							text = ts + "\tdelete\t" + p.text(e.Key) + "\n"
							cells = []string{ts, "delete", p.table(e.Key), ""}
						} else if e.Expiry != 0 {
							doc["expiry_ts"] = e.Expiry
						}
						if err := p.record(text, doc, cells...); err != nil {
							return err
						}
						if n++; count > 0 && n == count {
							break
						}
					}
					if count == 0 || n < count {
						// Every change of the update printed: its mark is
						// where to resume.
						mark = u.Resolved
						if progress {
							ts := strconv.FormatUint(u.Resolved, 10)
							if err := p.record(ts+"\tresolved\n", map[string]any{"resolved_ts": u.Resolved}, ts, "resolved", "", ""); err != nil {
								return err
							}
						}
					}
					if err := p.flush(); err != nil {
						return err
					}
				}
				if err := w.Err(); err != nil {
					return err
				}
				if count == 0 || n < count || ctx.Err() != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "watch stopped; every change at or below %d was printed: resume with --after-ts %d\n", mark, mark)
				}
				return nil
			})
		}}
	cmd.Flags().StringVar(&prefix, "prefix", "", "watch only the keys that begin with this prefix")
	cmd.Flags().Uint64Var(&afterTS, "after-ts", 0, "print the changes committed after this timestamp (0: every change retained)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many changes (0: run until stopped)")
	cmd.Flags().BoolVar(&progress, "progress", false, "also print TS<TAB>resolved when every change at or below TS has been printed")
	return cmd
}
