package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/bench/ycsb"
	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

func newYCSBCommand() *cobra.Command {
	var (
		addr, bellows, out, workloads, offload string
		records, operations, threads           int
		props                                  []string
		useTLS                                 bool
		tlsCompare                             int
		elastic, elasticRender                 bool
		ecfg                                   = ycsb.ElasticConfig{Records: 2_000_000, Pairs: 3, Settle: time.Minute}
	)
	cmd := &cobra.Command{
		Use:   "ycsb",
		Short: "The YCSB core workloads A–F (go-ycsb) through the Go client, against bellows local or --addr",
		Long: "For each workload: load recordcount records, then run operationcount operations, with go-ycsb's core\n" +
			"workload and measurement over the Bellows binding. Without --addr every workload gets a fresh\n" +
			"`bellows local` (one store, 4 regions, 2 compactors) in a temporary directory. Writes ycsb.json and ycsb.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			overrides := map[string]string{
				prop.RecordCount:    strconv.Itoa(records),
				prop.OperationCount: strconv.Itoa(operations),
				prop.ThreadCount:    strconv.Itoa(threads),
			}
			for _, kv := range props {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("-p %q: want key=value", kv)
				}
				overrides[k] = v
			}
			if elasticRender {
				r, err := ycsb.RenderElastic(out)
				if err == nil {
					fmt.Fprint(cmd.OutOrStdout(), ycsb.ElasticMarkdown(r))
				}
				return err
			}
			if elastic {
				return runElastic(cmd, bellows, out, ecfg, threads, overrides)
			}
			names := strings.Split(workloads, ",")
			for _, n := range names {
				if _, err := ycsb.Properties(n, overrides); err != nil {
					return err
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			work, err := os.MkdirTemp("", "bellows-ycsb-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			rep := ycsb.Report{Command: report.Command(os.Args[1:]), Provenance: report.Now(), Properties: overrides, Target: "`" + addr + "`"}
			if addr == "" {
				rep.Target = fmt.Sprintf("a fresh `bellows local --offload %s` per workload (one store with 4 regions, 2 compactors, file:// bucket; all on this machine)", offload)
				rep.Regime = fmt.Sprintf("about %d MB of records (recordcount × 10 fields × 100 B) in the store's %d MiB block cache: reads are served from memory; "+
					"every write waits for the WAL's group-commit fsync; the YCSB client, the store and the compactors share this machine's %d cores, "+
					"so the client's own CPU is part of every latency. One run per workload (no repeats, no spread): a sanity run, not a comparison.",
					records*1000/1_000_000, contract.DefaultBlockCacheBytes>>20, runtime.NumCPU())
			}
			if tlsCompare > 0 {
				if addr != "" {
					return errors.New("--tls-compare starts bellows local with and without TLS: it takes no --addr")
				}
				bin, err := findBellows(bellows)
				if err != nil {
					return err
				}
				c := ycsb.TLSComparison{Command: report.Command(os.Args[1:]), Provenance: report.Now(),
					Regime: fmt.Sprintf("a fresh `bellows local --offload %s` per run (one store, 2 compactors, file:// bucket, all on this machine's %d cores), "+
						"%d records of 10 × 100 B loaded and %d operations run by %d YCSB threads through the Go client; with TLS every connection "+
						"(client to store, store to compactor) is mutual TLS 1.3 with P-256 certificates; %d runs per mode, alternating. The data fits the store's block cache, "+
						"so reads are served from memory and the request path, where TLS sits, is most of an operation's cost: the regime in which TLS shows most; every write waits for the WAL's fsync",
						offload, runtime.NumCPU(), records, operations, threads, tlsCompare)}
				for i := range 2 * tlsCompare {
					withTLS := i%2 == 1
					for _, name := range names {
						dir := filepath.Join(work, fmt.Sprintf("%s-%d", name, i))
						seeds, stop, err := startLocal(ctx, bin, dir, offload, withTLS)
						if err != nil {
							return err
						}
						phases, err := runWorkload(ctx, seeds, name, overrides, work, withTLS)
						stop()
						if err != nil {
							return err
						}
						run := ycsb.NewTLSRun(phases[len(phases)-1], withTLS)
						fmt.Fprintf(cmd.ErrOrStderr(), "workload %s tls=%v: %.0f ops/s, p99 %v µs\n", strings.ToUpper(name), withTLS, run.OpsPerS, run.P99Us)
						c.Runs = append(c.Runs, run)
					}
				}
				if err := ycsb.WriteTLS(out, c); err != nil {
					return err
				}
				fmt.Fprint(cmd.OutOrStdout(), ycsb.TLSMarkdown(c))
				return nil
			}
			rep.Goal = "every core workload runs unchanged through go-ycsb over the Go client, with 0 failed operations; no latency or throughput target"
			for _, name := range names {
				seeds := addr
				stop := func() {}
				if addr == "" {
					bin, err := findBellows(bellows)
					if err != nil {
						return err
					}
					dir := filepath.Join(work, name)
					if seeds, stop, err = startLocal(ctx, bin, dir, offload, useTLS); err != nil {
						return err
					}
				}
				phases, err := runWorkload(ctx, seeds, name, overrides, work, useTLS && addr == "")
				stop()
				if err != nil {
					return err
				}
				for _, p := range phases {
					fmt.Fprintf(cmd.ErrOrStderr(), "workload %s %s: %.0f ops/s in %v, %d errors\n", strings.ToUpper(name), p.Phase, p.Throughput(), p.Took.Round(time.Millisecond), p.Errors())
				}
				rep.Phases = append(rep.Phases, phases...)
			}
			if err := ycsb.Write(out, rep); err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), ycsb.Markdown(rep))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "", "seed addresses of a running cluster (a store or the client Service); empty: start bellows local per workload")
	f.StringVar(&bellows, "bellows", "", "the bellows binary for bellows local (default: bellows next to this binary, then $PATH)")
	f.StringVar(&out, "out", "bench/results", "directory for ycsb.json and ycsb.md")
	f.StringVar(&workloads, "workloads", strings.Join(ycsb.Workloads, ","), "core workloads to run, in order")
	f.StringVar(&offload, "offload", "Preferred", "bellows local's offload mode")
	f.IntVar(&records, "recordcount", 100000, "records loaded (YCSB recordcount)")
	f.IntVar(&operations, "operationcount", 100000, "operations per run (YCSB operationcount)")
	f.IntVar(&threads, "threads", 16, "client threads (YCSB threadcount)")
	f.BoolVar(&useTLS, "tls", true, "bellows local serves mutual TLS (its default) and the client dials it with bellows local's client certificate")
	f.IntVar(&tlsCompare, "tls-compare", 0, "instead: run each workload N times with TLS and N times without, alternating, and write ycsb-tls.{json,md}")
	f.BoolVar(&elastic, "elastic", false, "instead: issue #26's benchmark: a workload-a load of --records into 3 `bellows store` processes starting with one region "+
		"and splitting by size, against the same load into 3 stores pre-split to the elastic run's final count; --pairs interleaved pairs; writes elastic.{json,md}")
	f.BoolVar(&elasticRender, "elastic-render", false, "instead: rewrite --out's elastic.md from its elastic.json (after findings were added to it)")
	f.IntVar(&ecfg.Records, "records", ecfg.Records, "--elastic: records loaded per run")
	f.IntVar(&ecfg.Pairs, "pairs", ecfg.Pairs, "--elastic: interleaved (elastic, pre-split) pairs")
	f.Int64Var(&ecfg.SplitBytes, "split-bytes", 0, fmt.Sprintf("--elastic: the elastic stores' --split-bytes (0: records × %d B / %d, so the load ends with 16 regions)", ycsb.ElasticBytesPerRecord, ycsb.ElasticSplitDivisor))
	f.DurationVar(&ecfg.Settle, "settle", ecfg.Settle, "--elastic: after the load, how long to watch for the stores' bytes to come within the goal")
	f.DurationVar(&ecfg.MergeAfter, "merge-after", 0, "--elastic: the stores' --merge-after, how long regions hold still before they merge or are re-cut (0: their default, 10m)")
	f.StringVar(&ecfg.KeepDir, "keep-dir", "", "--elastic: run in this directory and keep the stores' logs there (default: a temporary directory, removed)")
	f.DurationVar(&ecfg.BalanceInterval, "balance-interval", 0, "--elastic: the stores' --balance-interval (0: their default)")
	f.IntVar(&ecfg.MaxMovesInFlight, "max-moves-in-flight", 0, "--elastic: the stores' --max-moves-in-flight (0: their default)")
	f.StringArrayVarP(&props, "property", "p", nil, "any other YCSB property, key=value (repeatable), e.g. -p requestdistribution=uniform")
	return cmd
}

// runWorkload loads and runs one workload through a client of seeds.
func runWorkload(ctx context.Context, seeds, name string, overrides map[string]string, work string, withTLS bool) ([]ycsb.Phase, error) {
	dir := ""
	if withTLS {
		root, err := tlsconfig.LocalRoot()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(root, "client")
	}
	creds, err := tlsconfig.Dial(dir)
	if err != nil {
		return nil, err
	}
	dial, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.New(dial, strings.Split(seeds, ","), client.Options{DialOptions: []grpc.DialOption{creds}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var phases []ycsb.Phase
	for _, load := range []bool{true, false} {
		p, err := ycsb.RunPhase(ctx, c, name, load, overrides, work)
		if err != nil {
			return nil, err
		}
		phases = append(phases, p)
	}
	return phases, nil
}

// localReady is bellows local's last line once everything serves.
var localReady = regexp.MustCompile(`^ready; try: .* --addr (\S+);`)

// startLocal runs `bellows local` on fresh data in dir and returns the
// store's address and how to stop it.
func startLocal(ctx context.Context, bin, dir, offload string, withTLS bool) (string, func(), error) {
	cmd := exec.CommandContext(ctx, bin, "local", "--data-dir="+dir, "--create-bucket", "--listen=127.0.0.1:0", "--offload="+offload, fmt.Sprintf("--tls=%v", withTLS))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := localReady.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(found)
	}()
	select {
	case a, ok := <-found:
		if !ok {
			stop()
			return "", nil, fmt.Errorf("bellows local exited before it was ready (logs in %s)", filepath.Join(dir, "logs"))
		}
		return a, stop, nil
	case <-time.After(60 * time.Second):
		stop()
		return "", nil, fmt.Errorf("bellows local not ready in 60s (logs in %s)", filepath.Join(dir, "logs"))
	}
}

// runElastic is `ycsb --elastic`.
func runElastic(cmd *cobra.Command, bellows, out string, cfg ycsb.ElasticConfig, threads int, overrides map[string]string) error {
	bin, err := findBellows(bellows)
	if err != nil {
		return err
	}
	cfg.Bellows, cfg.Threads = bin, threads
	cfg.Props = map[string]string{}
	for k, v := range overrides {
		if k != prop.RecordCount && k != prop.OperationCount && k != prop.ThreadCount {
			cfg.Props[k] = v
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work := cfg.KeepDir
	if work == "" {
		tmp, err := os.MkdirTemp("", "bellows-elastic-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		work = tmp
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	splitBytes := cfg.SplitBytes
	rule := "--split-bytes as given"
	if splitBytes <= 0 {
		splitBytes = int64(cfg.Records) * ycsb.ElasticBytesPerRecord / ycsb.ElasticSplitDivisor
		rule = fmt.Sprintf("--split-bytes = records × %d B (a record's data as regions count it, measured) / %d, so that binary splits of a uniform load end with 16 regions of 0.75× the split size",
			ycsb.ElasticBytesPerRecord, ycsb.ElasticSplitDivisor)
	}
	rep := ycsb.ElasticReport{
		Command:    report.Command(os.Args[1:]),
		Provenance: report.Now(),
		Regime: fmt.Sprintf("%d records of 10 × 100 B (about %d MB of data) loaded by go-ycsb's workload-a load phase with %d client threads through the Go client; "+
			"3 `bellows store` processes, the YCSB client and a file:// bucket all on this one machine's %d cores, which other processes may share (noisy: judge by the ratios within a pair); "+
			"offload Disabled (each store compacts in-process); the data fits in memory (memstores of 128 MiB per region and the page cache), so the load is bound by the CPU and the WAL's group-commit fsyncs, not by reads",
			cfg.Records, int64(cfg.Records)*ycsb.ElasticBytesPerRecord/1_000_000, threads, runtime.NumCPU()),
		Config: fmt.Sprintf("elastic: `--regions=1 --split-bytes=%d` (%s); pre-split: `--split-keys` at the YCSB keys that cut the records into as many equal ranges as the elastic run of the same pair ended with, `--split-bytes=0`; "+
			"both: `--region-owner=I/3 --peers=… --offload=Disabled`, balancer on (--balance-interval %s, --max-moves-in-flight %s, --merge-after %s, --recut-tolerance 0.2 (default; re-cuts need merges, so only the elastic stores, whose --merge-bytes is a quarter of the split size, make them)). Pairs run elastic then pre-split, each on a fresh cluster. "+
			"Split refusals come from the stores' `split region … writes refused for=` log lines, moves from `released region … took=` on the old owner and `claimed region` on the new one (the move's unavailability: from the release's start to the claim)",
			splitBytes, rule, orDefault(cfg.BalanceInterval.String(), cfg.BalanceInterval == 0, "5s"), orDefault(strconv.Itoa(cfg.MaxMovesInFlight), cfg.MaxMovesInFlight == 0, "2"),
			orDefault(cfg.MergeAfter.String(), cfg.MergeAfter == 0, "10m")),
	}
	runs, err := ycsb.RunElastic(cmd.Context(), cfg, work, func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) })
	rep.Runs = runs
	if werr := ycsb.WriteElastic(out, rep); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprint(cmd.OutOrStdout(), ycsb.ElasticMarkdown(rep))
	return err
}

func orDefault(v string, isDefault bool, def string) string {
	if isDefault {
		return def + " (default)"
	}
	return v
}
