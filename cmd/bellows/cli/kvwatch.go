package cli

import (
	"context"
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
			start, end, err := rangeArgs(cmd, f.codec(), prefix, args)
			if err != nil {
				return err
			}
			return f.with(cmd, func(ctx context.Context, cl *client.Client) error {
				w := cl.Watch(ctx, start, end, client.WatchOptions{AfterTS: afterTS})
				defer w.Close()
				mark, n := afterTS, 0
				for (count == 0 || n < count) && w.Next() {
					u := w.Update()
					for _, e := range u.Events {
						if err := p.change(e.Key, e.Value, e.CommitTS, e.Delete, e.Expiry); err != nil {
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
							if err := p.resolved(u.Resolved); err != nil {
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

// change prints one committed change as watch and changefeed print it:
// TS<TAB>put<TAB>KEY<TAB>VALUE or TS<TAB>delete<TAB>KEY; in JSON its
// commit_ts, type, key, value and expiry_ts.
func (p *printer) change(key, value []byte, commitTS uint64, del bool, expiry uint64) error {
	ts := strconv.FormatUint(commitTS, 10)
	if del {
		return p.record(ts+"\tdelete\t"+p.text(key)+"\n", map[string]any{"commit_ts": commitTS, "type": "delete", "key": p.json(key)},
			ts, "delete", p.table(key), "")
	}
	doc := map[string]any{"commit_ts": commitTS, "type": "put", "key": p.json(key), "value": p.json(value)}
	if expiry != 0 {
		doc["expiry_ts"] = expiry
	}
	return p.record(ts+"\tput\t"+p.text(key)+"\t"+p.text(value)+"\n", doc, ts, "put", p.table(key), p.table(value))
}

// resolved prints a resolved mark: TS<TAB>resolved; in JSON resolved_ts.
func (p *printer) resolved(mark uint64) error {
	ts := strconv.FormatUint(mark, 10)
	return p.record(ts+"\tresolved\n", map[string]any{"resolved_ts": mark}, ts, "resolved", "", "")
}
