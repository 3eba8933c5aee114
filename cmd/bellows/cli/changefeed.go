package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/storage-engine/changefeed"
)

// changefeedFlags are `bellows changefeed`'s settings.
type changefeedFlags struct {
	bucket, prefix, checkpoint, webhook, metricsListen string
	afterTS                                            uint64
	poll                                               time.Duration
	progress                                           bool
	count                                              int
}

// errCounted ends a feed that delivered --count changes.
var errCounted = errors.New("changefeed: --count changes delivered")

func newChangefeedCommand() *cobra.Command {
	f := &changefeedFlags{}
	out := &kvFlags{}
	cmd := &cobra.Command{
		Use:   "changefeed [START [END]]",
		Short: "Follow a cluster's committed changes from its bucket alone (its WAL archive), as JSON lines, text or a webhook",
		Long: `Reads the changes committed to the keys of [START, END) (--prefix P: the
keys that begin with P) from the cluster's bucket: its region map and every
region's WAL archive (docs/watch.md, "A change feed from the bucket"). No
store is contacted, so a feed costs the cluster nothing but the bucket's
reads, and it goes on while stores restart, move regions or fail over.

It prints what bellows kv watch prints (TS<TAB>put<TAB>KEY<TAB>VALUE,
TS<TAB>delete<TAB>KEY; -o json; --progress adds TS<TAB>resolved), or with
--webhook URL posts each update as JSON ({"changes": [{"commit_ts",
"type", "key", "value", "expiry_ts"}], "resolved_ts"}; keys and values in
base64), retried with backoff until the endpoint answers 2xx.

Ordering, as CockroachDB's changefeeds: each change once, each key's in
commit order, and a resolved mark TS says no change at or below TS comes
after it. Changes come about one archive interval (the stores'
--wal-archive-interval, 5s by default) behind the stores; the resolved mark
lags as far as the idlest region of the range, which refreshes its
frontier every 12 intervals (a minute by default).

--checkpoint FILE keeps the position: the newest mark whose changes were
all printed or posted is written there, and a restart resumes after it
(a change after the mark may come again: delivery is at least once).
Without a checkpoint or --after-ts the feed starts at the archive's mark
now.`,
		Example: "  bellows changefeed --bucket s3://kv-demo --prefix orders/ -o json\n" +
			"  bellows changefeed --bucket s3://kv-demo --webhook https://hooks.example.com/kv --checkpoint /var/lib/feed/pos",
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.count < 0 {
				return fmt.Errorf("--count %d: must be 0 (no limit) or more", f.count)
			}
			ctx, cancel, err := commandContext(cmd.Context(), out.timeout)
			if err != nil {
				return err
			}
			defer cancel()
			start, end, err := rangeArgs(cmd, out.codec(), f.prefix, args)
			if err != nil {
				return err
			}
			after, err := f.startAfter(cmd)
			if err != nil {
				return err
			}
			bucket, err := openBucketFlag(ctx, "bucket", f.bucket, true)
			if err != nil {
				return err
			}
			defer bucket.Close()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			opts := changefeed.Options{Start: start, End: end, AfterTS: after, PollInterval: f.poll, Logger: log}
			if f.metricsListen != "" {
				reg := prometheus.NewRegistry()
				opts.Metrics = changefeed.NewMetrics(reg)
				stop, err := serveMetrics(f.metricsListen, reg)
				if err != nil {
					return err
				}
				defer stop()
			}
			deliver, err := f.delivery(cmd, out, log)
			if err != nil {
				return err
			}
			feed := changefeed.New(bucket, opts)
			// delivered: every change at or below it was printed or
			// posted (the mark of the last update delivered whole).
			delivered := after
			err = feed.Run(ctx, func(u changefeed.Update) error {
				if err := deliver(ctx, u); err != nil {
					return err
				}
				if u.Resolved == 0 {
					return nil
				}
				delivered = u.Resolved
				if f.checkpoint != "" {
					return changefeed.Checkpoint{Path: f.checkpoint}.Save(u.Resolved)
				}
				return nil
			})
			switch {
			case errors.Is(err, changefeed.ErrBeforeArchive):
				return &userError{what: err.Error(), hint: "start later (--after-ts), or remove the checkpoint to start at the archive's mark now", cause: err}
			case (ctx.Err() != nil || errors.Is(err, errCounted)) && delivered == 0:
				fmt.Fprintln(cmd.ErrOrStderr(), "changefeed stopped before its first resolved mark")
				return nil
			case ctx.Err() != nil || errors.Is(err, errCounted):
				fmt.Fprintf(cmd.ErrOrStderr(), "changefeed stopped; every change at or below %d was delivered: resume with --after-ts %d\n", delivered, delivered)
				return nil
			}
			return err
		}}
	fl := cmd.Flags()
	fl.StringVar(&f.bucket, "bucket", defaultLocalBucket(), "the cluster's bucket: a URL, or a directory (the default is bellows local's)")
	fl.StringVar(&f.prefix, "prefix", "", "follow only the keys that begin with this prefix")
	fl.Uint64Var(&f.afterTS, "after-ts", 0, "deliver the changes committed after this timestamp (0: after the archive's mark now, or the checkpoint's)")
	fl.StringVar(&f.checkpoint, "checkpoint", "", "a file that keeps the feed's position: resumed from when it exists, written at each mark delivered")
	fl.StringVar(&f.webhook, "webhook", "", "post each update as JSON to this URL (retried until it answers 2xx) instead of printing it")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve the feed's metrics (bellows_changefeed_lag_seconds, …) on this address's /metrics")
	fl.DurationVar(&f.poll, "poll-interval", changefeed.DefaultPollInterval, "how often to read the archive")
	fl.BoolVar(&f.progress, "progress", false, "also print TS<TAB>resolved at each resolved mark")
	fl.IntVar(&f.count, "count", 0, "stop after this many changes (0: run until stopped)")
	fl.BoolVar(&out.hex, "hex", false, "keys and values are hexadecimal, in the arguments and the output")
	fl.BoolVar(&out.raw, "raw", false, "text output: keys and values as their bytes are, not quoted when they are not plain text")
	fl.StringVarP(&out.output, "output", "o", "text", "output format: "+strings.Join(outputFormats, ", "))
	fl.DurationVar(&out.timeout, "timeout", 0, "stop after this long (0: run until Ctrl-C)")
	return cmd
}

// startAfter is where the feed starts: the checkpoint's mark when it
// exists, else --after-ts. Both, disagreeing, is refused: which one was
// meant is not for the command to guess.
func (f *changefeedFlags) startAfter(cmd *cobra.Command) (uint64, error) {
	if f.checkpoint == "" {
		return f.afterTS, nil
	}
	ts, found, err := changefeed.Checkpoint{Path: f.checkpoint}.Load()
	switch {
	case err != nil:
		return 0, err
	case !found:
		return f.afterTS, nil
	case cmd.Flags().Changed("after-ts") && f.afterTS != ts:
		return 0, fmt.Errorf("--after-ts %d and --checkpoint %s (at %d) disagree: give one, or remove the checkpoint to start at --after-ts", f.afterTS, f.checkpoint, ts)
	}
	return ts, nil
}

// delivery is where updates go: the webhook, or the output.
func (f *changefeedFlags) delivery(cmd *cobra.Command, out *kvFlags, log *slog.Logger) (func(context.Context, changefeed.Update) error, error) {
	if f.webhook != "" {
		if !strings.HasPrefix(f.webhook, "http://") && !strings.HasPrefix(f.webhook, "https://") {
			return nil, fmt.Errorf("--webhook %q: give an http:// or https:// URL", f.webhook)
		}
		hook := &changefeed.Webhook{URL: f.webhook, Logger: log}
		n := 0
		return func(ctx context.Context, u changefeed.Update) error {
			if err := hook.Send(ctx, u); err != nil {
				return err
			}
			if n += len(u.Changes); f.count > 0 && n >= f.count {
				return errCounted
			}
			return nil
		}, nil
	}
	p, err := out.printer(cmd, "TS", "TYPE", "KEY", "VALUE")
	if err != nil {
		return nil, err
	}
	n := 0
	return func(_ context.Context, u changefeed.Update) error {
		for _, c := range u.Changes {
			if err := p.change(c.Key, c.Value, c.TS, c.Delete, c.Expiry); err != nil {
				return err
			}
			if n++; f.count > 0 && n == f.count {
				if err := p.flush(); err != nil {
					return err
				}
				return errCounted
			}
		}
		if u.Resolved > 0 && f.progress {
			if err := p.resolved(u.Resolved); err != nil {
				return err
			}
		}
		return p.flush()
	}, nil
}

// rangeArgs is the key range [START, END) of the arguments, or --prefix's.
func rangeArgs(cmd *cobra.Command, c codec, prefix string, args []string) (start, end []byte, err error) {
	if cmd.Flags().Changed("prefix") {
		if len(args) > 0 {
			return nil, nil, errors.New("--prefix P takes no START or END: it selects the keys that begin with P")
		}
		if start, err = c.arg("--prefix", prefix); err != nil {
			return nil, nil, err
		}
		return start, client.PrefixEnd(start), nil
	}
	if len(args) > 0 {
		if start, err = c.arg("START", args[0]); err != nil {
			return nil, nil, err
		}
	}
	if len(args) > 1 {
		if end, err = c.arg("END", args[1]); err != nil {
			return nil, nil, err
		}
	}
	return start, end, nil
}

// serveMetrics serves reg on addr's /metrics until stop.
func serveMetrics(addr string, reg *prometheus.Registry) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}
