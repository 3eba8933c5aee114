package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// defaultLocalBucket is the bucket directory of `bellows local`'s default
// data directory, relative to where the command runs, as `make run` is.
func defaultLocalBucket() string { return filepath.Join(defaultLocalDataDir, "bucket") }

type backupFlags struct {
	bucket, output string
	timeout        time.Duration
}

// bucketURL is a bucket flag's value as a URL: a URL as given, a
// directory as its absolute file:// URL.
func bucketURL(s string) (string, error) {
	if strings.Contains(s, "://") {
		return s, nil
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return "", err
	}
	return "file://" + abs, nil
}

// openBucketFlag opens the bucket a flag names. existing: a directory (or
// file:// URL) that does not exist is refused rather than created, since
// only a restore's target may be new and a mistyped path would otherwise
// read as an empty bucket.
func openBucketFlag(ctx context.Context, flag, value string, existing bool) (*blob.Bucket, error) {
	u, err := bucketURL(value)
	if path, isFile := strings.CutPrefix(u, "file://"); err == nil && isFile && existing {
		if _, serr := os.Stat(strings.SplitN(path, "?", 2)[0]); serr != nil {
			return nil, &userError{what: fmt.Sprintf("--%s %s: no such directory", flag, value),
				hint: "give the cluster's bucket: a URL (s3://, gs://, azblob://, file:///ABSOLUTE/PATH) or a directory; bellows local's is " + defaultLocalBucket()}
		}
	}
	if err == nil {
		var b *blob.Bucket
		if b, err = blob.Open(ctx, u); err == nil {
			return b, nil
		}
	}
	return nil, &userError{what: fmt.Sprintf("--%s %s: %v", flag, value, err), hint: "give a bucket URL (s3://, gs://, azblob://, file:///ABSOLUTE/PATH) or a directory"}
}

func (f *backupFlags) open(ctx context.Context) (*blob.Bucket, error) {
	b, err := openBucketFlag(ctx, "bucket", f.bucket, true)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func newBackupCommand() *cobra.Command {
	f := &backupFlags{}
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Base backups of a cluster's bucket at one timestamp: create, list, describe, delete, prune",
		Long: `A backup at T holds every version committed at or before T in every region and
none after it: a cross-region transaction is in it entirely or not at all
(docs/backup.md). Its files are copied inside the cluster's bucket under
backups/, each at most once across all backups; bellows restore makes a new
cluster of one.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.bucket, "bucket", defaultLocalBucket(), "the cluster's bucket: a URL, or a directory (the default is bellows local's)")
	pf.DurationVar(&f.timeout, "timeout", 10*time.Minute, "per-command timeout (0: none; Ctrl-C still stops)")
	pf.StringVarP(&f.output, "output", "o", "text", "output format: text or json")

	var addr string
	create := &cobra.Command{
		Use:   "create [ID]",
		Short: "Take a backup now (ID: backup-<UTC time> unless given)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := backup.NewID(time.Now())
			if len(args) == 1 {
				id = args[0]
			}
			if err := backup.CheckID(id); err != nil {
				return err
			}
			if err := useContext(cmd, &addr); err != nil {
				return err
			}
			seeds, err := parseSeeds(addr)
			if err != nil {
				return err
			}
			ctx, cancel, err := commandContext(cmd.Context(), f.timeout)
			if err != nil {
				return err
			}
			defer cancel()
			if err := reachAny(ctx, seeds); err != nil {
				return err
			}
			// A store drives the backup, in its own bucket: this command
			// needs no access to it. The next seed is asked if one is down.
			var rec backup.Backup
			for _, seed := range seeds {
				if rec, err = createAt(ctx, seed, id); status.Code(err) != codes.Unavailable {
					break
				}
			}
			if err != nil {
				return explain(err, f.timeout)
			}
			return f.print(cmd.OutOrStdout(), rec, func(w io.Writer) {
				fmt.Fprintf(w, "OK backup %s at ts %d (%s): %d regions, %d files, %s (%s copied) in %s\n",
					rec.ID, rec.TS, backup.FormatTS(rec.TS), len(rec.Regions), rec.Files(), bytesCell(rec.Bytes()),
					bytesCell(rec.CopiedBytes), rec.Finished.Sub(rec.Started).Round(time.Millisecond))
			})
		},
	}
	addClientTLSFlag(create.Flags())
	create.Flags().StringVar(&addr, "addr", defaultStoreAddr, "seed addresses of the cluster's stores, comma-separated: the first that answers takes the backup, in its own bucket (--bucket is not used)")

	list := &cobra.Command{
		Use: "list", Short: "List the backups in the bucket, oldest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				all, err := backup.List(ctx, b)
				if err != nil {
					return err
				}
				running, err := backup.Running(ctx, b)
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), map[string]any{"backups": all, "running": running}, func(w io.Writer) {
					_ = printBackups(w, all, running)
				})
			})
		},
	}
	describe := &cobra.Command{
		Use: "describe ID", Short: "Show a backup's regions and files", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				rec, err := backup.Load(ctx, b, args[0])
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), rec, func(w io.Writer) {
					fmt.Fprintf(w, "backup %s\n  ts: %d (%s)\n  taken: %s to %s\n  region map epoch: %d\n  bytes: %s (%s copied by this backup)\n",
						rec.ID, rec.TS, backup.FormatTS(rec.TS), rec.Started.Format(time.RFC3339), rec.Finished.Format(time.RFC3339),
						rec.MapEpoch, bytesCell(rec.Bytes()), bytesCell(rec.CopiedBytes))
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "REGION\tSTART\tEND\tFILES\tBYTES\tENTRIES")
					for _, r := range rec.Regions {
						var n int64
						var entries uint64
						for _, fl := range r.Files {
							n, entries = n+fl.Size, entries+fl.Entries
						}
						end := "∞"
						if r.End != nil {
							end = fmt.Sprintf("%q", r.End)
						}
						fmt.Fprintf(tw, "%s\t%q\t%s\t%d\t%s\t%d\n", r.Name, r.Start, end, len(r.Files), bytesCell(n), entries)
					}
					_ = tw.Flush()
				})
			})
		},
	}
	deleteCmd := &cobra.Command{
		Use: "delete ID", Short: "Delete a backup and every copied file no other backup names", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				n, err := backup.Delete(ctx, b, args[0])
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), map[string]any{"deleted": args[0], "filesRemoved": n}, func(w io.Writer) {
					fmt.Fprintf(w, "OK deleted backup %s, and %s no other backup uses\n", args[0], files(n))
				})
			})
		},
	}
	var policy backup.Policy
	prune := &cobra.Command{
		Use: "prune", Short: "Delete the backups a retention policy does not keep, and the files only they name", Args: cobra.NoArgs,
		Example: "  bellows backup prune --keep-last 7 --max-age 720h",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if policy.KeepLast <= 0 && policy.MaxAge <= 0 {
				return &userError{what: "prune needs a policy: it would keep no backup",
					hint: "give --keep-last N (the newest N backups), --max-age DURATION (those that finished within it), or both; a backup either keeps is kept"}
			}
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				deleted, n, err := backup.Prune(ctx, b, policy, time.Now())
				if err != nil {
					return err
				}
				kept, err := backup.List(ctx, b)
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), map[string]any{"deleted": deleted, "filesRemoved": n}, func(w io.Writer) {
					fmt.Fprintln(w, pruneText(deleted, n, len(kept)))
				})
			})
		},
	}
	prune.Flags().IntVar(&policy.KeepLast, "keep-last", 0, "keep the newest N backups")
	prune.Flags().DurationVar(&policy.MaxAge, "max-age", 0, "keep every backup that finished within this long (e.g. 720h)")
	abandon := &cobra.Command{
		Use: "abandon ID", Short: "Remove what a crashed backup left (its in-progress marker and unnamed files)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				n, err := backup.Abandon(ctx, b, args[0])
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), map[string]any{"abandoned": args[0], "filesRemoved": n}, func(w io.Writer) {
					fmt.Fprintf(w, "OK abandoned backup %s: removed its in-progress marker and %s no finished backup uses\n", args[0], files(n))
				})
			})
		},
	}
	window := &cobra.Command{
		Use: "window", Short: "Show the times a point-in-time restore can reach: the backups and the WAL archive", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.withBucket(cmd, func(ctx context.Context, b *blob.Bucket) error {
				w, err := backup.ArchiveWindow(ctx, b)
				if err != nil {
					return err
				}
				return f.print(cmd.OutOrStdout(), map[string]any{"from": w.From, "to": w.To, "limit": w.Limit, "window": w.String(), "streams": w.Streams, "broken": w.Broken},
					func(w2 io.Writer) { printWindow(w2, w) })
			})
		},
	}
	cmd.AddCommand(create, list, describe, deleteCmd, prune, abandon, window)
	return cmd
}

func (f *backupFlags) withBucket(cmd *cobra.Command, fn func(ctx context.Context, b *blob.Bucket) error) error {
	ctx, cancel, err := commandContext(cmd.Context(), f.timeout)
	if err != nil {
		return err
	}
	defer cancel()
	b, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(ctx, b)
}

// print writes doc as JSON with -o json, else text.
func (f *backupFlags) print(w io.Writer, doc any, text func(io.Writer)) error {
	switch f.output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	case "text", "":
		text(w)
		return nil
	}
	return fmt.Errorf("--output %q: want text or json", f.output)
}

// pruneText says what a prune did: the backups it deleted, the files
// that went with them, and how many backups are left.
func pruneText(deleted []string, nFiles, kept int) string {
	switch {
	case len(deleted) == 0 && kept == 1:
		return "OK deleted 0 backups: the policy keeps the only one"
	case len(deleted) == 0:
		return fmt.Sprintf("OK deleted 0 backups: the policy keeps all %d", kept)
	}
	return fmt.Sprintf("OK deleted %s (%s), and %s no remaining backup uses; %s left",
		plural(len(deleted), "backup"), strings.Join(deleted, ", "), files(nFiles), plural(kept, "backup"))
}

// files is "1 copied file" or "N copied files".
func files(n int) string { return plural(n, "copied file") }

// plural is n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// archiveEndNote says how a store moves its archive's end: the reason a
// time just past it is refused.
const archiveEndNote = "each store moves its archive's end every --wal-archive-interval (5s by default) while it is written to, but only about once a minute while idle"

// windowLimit is what holds the window's end, in plain words.
func windowLimit(w backup.Window) string {
	if r, ok := strings.CutSuffix(w.Limit, "'s archive frontier"); ok {
		return r + "'s WAL archive ends there, the least far of all regions'"
	}
	return w.Limit
}

// printWindow says what a point-in-time restore from the bucket can reach.
func printWindow(w io.Writer, win backup.Window) {
	switch {
	case len(win.Backups) == 0:
		fmt.Fprintln(w, "a restore can reach nothing yet: it starts from a backup, and there is none (bellows backup create takes one)")
	case win.To < win.From:
		fmt.Fprintf(w, "a restore can reach the backups' own times only (bellows restore --backup ID): the WAL archive does not yet reach past the oldest backup\n")
		if win.To > 0 {
			fmt.Fprintf(w, "  the archive ends at %s: %s\n", backup.FormatTS(win.To), windowLimit(win))
		} else {
			fmt.Fprintf(w, "  the archive ends before it begins: %s\n", windowLimit(win))
		}
		fmt.Fprintf(w, "  %s; write to the cluster, or wait, and look again\n", archiveEndNote)
	default:
		fmt.Fprintf(w, "a restore can reach any time from %s (the oldest backup) to %s (the end of the WAL archive)\n", backup.FormatTS(win.From), backup.FormatTS(win.To))
		fmt.Fprintf(w, "  the end: %s; %s\n", windowLimit(win), archiveEndNote)
	}
	for _, s := range win.Broken {
		fmt.Fprintf(w, "  region %s's archive from WAL %s ends at %s without its final record: a restore past it needs a backup taken after it\n", s.Region, s.WALID, backup.FormatTS(s.TS))
	}
	fmt.Fprintf(w, "%s (bellows backup list), %s\n", plural(len(win.Backups), "backup"), plural(len(win.Streams), "WAL archive stream"))
}

func newRestoreCommand() *cobra.Command {
	var from, to, id, at string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Make a new cluster's bucket from a backup",
		Long: `Copies backup --backup of the bucket --from into --to, an empty bucket, as a new
cluster: stores started on --to serve exactly what a read at the backup's
timestamp returned. --to must be empty; a backup with a missing or damaged
file is refused before anything is written.

With --time instead, restores the state at that time: the newest backup at or
before it plus the versions the WAL archive holds up to it, a consistent
snapshot across every region (a transaction is in it whole or not at all).
A time outside what the backups and the archive cover is refused, naming
what they cover (bellows backup window shows it). --time latest restores to
the end of the archive, the newest time a restore can reach: the way to
restore everything, since "now" is past the archive's end until every store
has shipped its WAL (within --wal-archive-interval, 5s by default, while it is
written to; about a minute while it is idle).

A restore that fails removes the --to directory it created; one that existed
before is left as it was.`,
		Example: "  bellows restore --backup backup-20261127t101500z --to restored/bucket\n" +
			"  bellows local --data-dir restored\n" +
			"  bellows restore --from s3://old-cluster --backup nightly-20261127t030000z --to s3://new-cluster\n" +
			"  bellows restore --from s3://old-cluster --time 2026-11-27T10:42:00Z --to s3://new-cluster\n" +
			"  bellows restore --time latest --to restored/bucket",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (retErr error) {
			if (id == "") == (at == "") {
				return errors.New("give one of --backup (the ID of a backup: bellows backup list --bucket URL shows them) or --time (RFC 3339: bellows backup window --bucket URL shows what the archive covers)")
			}
			var target uint64
			latest := at == "latest"
			if at != "" && !latest {
				var err error
				if target, err = backup.ParseTime(at); err != nil {
					return fmt.Errorf("--time: %w (or latest: the end of the archive)", err)
				}
			}
			if to == "" {
				return errors.New("--to is required: the URL of the new, empty bucket to restore into")
			}
			ctx, cancel, err := commandContext(cmd.Context(), timeout)
			if err != nil {
				return err
			}
			defer cancel()
			src, err := openBucketFlag(ctx, "from", from, true)
			if err != nil {
				return err
			}
			defer src.Close()
			created, err := newDirs(to)
			if err != nil {
				return err
			}
			// A restore that fails leaves no directory it made behind: a
			// second attempt would find it and need it gone. (Deferred
			// before the bucket's Close, so it runs after it.)
			defer func() {
				if retErr != nil {
					retErr = errors.Join(retErr, removeCreated(created))
				}
			}()
			dst, err := openBucketFlag(ctx, "to", to, false)
			if err != nil {
				return err
			}
			defer dst.Close()
			start := time.Now()
			if latest {
				w, err := backup.ArchiveWindow(ctx, src)
				if err != nil {
					return err
				}
				if target = latestTime(w); target == 0 {
					return &userError{what: "--time latest: " + from + " holds no backup to start from", hint: "take one first: bellows backup create"}
				}
			}
			if at != "" {
				rec, err := backup.RestoreToTime(ctx, src, target, dst)
				if err != nil {
					return pastTheArchive(ctx, src, target, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "OK restored the state at %s (ts %d): backup %s (%s) and the WAL archive after it, %s, in %s into %s\n",
					backup.FormatTS(target), target, rec.ID, backup.FormatTS(rec.TS), plural(len(rec.Regions), "region"), time.Since(start).Round(time.Millisecond), to)
				return nil
			}
			rec, err := backup.Restore(ctx, src, id, dst)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "OK restored backup %s (ts %d, %s): %d regions, %d files, %s in %s into %s\n",
				rec.ID, rec.TS, backup.FormatTS(rec.TS), len(rec.Regions), rec.Files(), bytesCell(rec.Bytes()),
				time.Since(start).Round(time.Millisecond), to)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&from, "from", defaultLocalBucket(), "the bucket holding the backup: a URL or a directory")
	fl.StringVar(&id, "backup", "", "the backup's ID")
	fl.StringVar(&at, "time", "", "restore the state at this time (RFC 3339, or a timestamp in nanoseconds; latest: the end of the archive) instead of a backup's")
	fl.StringVar(&to, "to", "", "the new, empty bucket to restore into: a URL or a directory (bellows local --data-dir DIR uses DIR/bucket)")
	fl.DurationVar(&timeout, "timeout", 0, "give up after this long (0: no limit; Ctrl-C still stops)")
	return cmd
}

// latestTime is the newest time a restore from w reaches: the archive's
// end, or the newest backup's when the archive does not reach past it; 0
// with no backup.
func latestTime(w backup.Window) uint64 {
	if len(w.Backups) == 0 {
		return 0
	}
	return max(w.To, w.Backups[len(w.Backups)-1].TS)
}

// pastTheArchive explains a refusal of a restore to target that is past
// the archive's end: what the end is, why it lags, and what to do.
func pastTheArchive(ctx context.Context, src *blob.Bucket, target uint64, err error) error {
	if !errors.Is(err, backup.ErrOutsideWindow) {
		return err
	}
	w, werr := backup.ArchiveWindow(ctx, src)
	if werr != nil || len(w.Backups) == 0 || target <= latestTime(w) {
		return err
	}
	end := latestTime(w)
	return &userError{
		what: fmt.Sprintf("--time %s is past what the archive holds: it ends at %s (%s)", backup.FormatTS(target), backup.FormatTS(end), windowLimit(w)),
		hint: archiveEndNote + ". To restore everything the archive holds, give --time latest (or --time " + backup.FormatTS(end) +
			"); for a later time, write to the cluster (or wait) until bellows backup window shows an end past it",
		cause: err,
	}
}

// newDirs is the directory of a file:// bucket (or a directory) that does
// not exist yet and would be made to hold it: its topmost missing
// ancestor, or "" when it exists or is no directory.
func newDirs(bucket string) (string, error) {
	u, err := bucketURL(bucket)
	if err != nil {
		return "", err
	}
	path, ok := strings.CutPrefix(u, "file://")
	if !ok {
		return "", nil
	}
	path = filepath.Clean(strings.SplitN(path, "?", 2)[0])
	top := ""
	for p := path; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			return top, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", nil
		}
		top = p
		if filepath.Dir(p) == p {
			return top, nil
		}
	}
}

// removeCreated removes dir, which the command made (newDirs): everything
// in it is what the command wrote.
func removeCreated(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s, which the failed restore made: %w", dir, err)
	}
	return nil
}

// createAt asks the store at addr to take backup id (Admin.Backup).
func createAt(ctx context.Context, addr, id string) (backup.Backup, error) {
	dial, err := clientDial(addr)
	if err != nil {
		return backup.Backup{}, err
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return backup.Backup{}, err
	}
	defer conn.Close()
	resp, err := kvpb.NewAdminClient(conn).Backup(ctx, &kvpb.BackupRequest{Id: id})
	if err != nil {
		return backup.Backup{}, err
	}
	var rec backup.Backup
	if err := json.Unmarshal(resp.BackupJson, &rec); err != nil {
		return backup.Backup{}, fmt.Errorf("decoding the backup's record: %w", err)
	}
	return rec, nil
}

// printBackups is the table of backup list (and kubectl bellows backups).
func printBackups(w io.Writer, all []backup.Backup, running []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTS\tTIME\tREGIONS\tFILES\tBYTES\tCOPIED")
	for _, r := range all {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.TS, backup.FormatTS(r.TS), len(r.Regions), r.Files(),
			bytesCell(r.Bytes()), bytesCell(r.CopiedBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, id := range running {
		if _, err := fmt.Fprintf(w, "%s: running, or crashed (bellows backup abandon %s removes a crashed one's files)\n", id, id); err != nil {
			return err
		}
	}
	return nil
}
