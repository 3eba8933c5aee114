package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/contract"
)

// defaultLocalDataDir is where `make run` keeps its data: the one data
// directory bellows local creates a cluster in without being asked.
const defaultLocalDataDir = "bellows-data"

// localLockFile, in the data directory, is held (flock) by the running
// bellows local; it holds that process's pid.
const localLockFile = "local.lock"

type localFlags struct {
	dataDir, storeListen, offloadMode, cacheBytes, memstorePolicy string
	// splitBytes, when empty, is half of cacheBytes (docs/regions.md: a
	// region's major compaction must fit a worker's cache twice).
	splitBytes          string
	compactors, regions int
	createBucket        bool
	tls                 bool
}

// validate checks what the children would refuse, so a mistake is said
// before anything starts.
func (f *localFlags) validate() error {
	var errs []error
	if f.compactors < 0 {
		errs = append(errs, fmt.Errorf("--compactors %d: must be 0 or more", f.compactors))
	}
	if f.regions < 1 {
		errs = append(errs, fmt.Errorf("--regions %d: must be 1 or more", f.regions))
	}
	if !slices.Contains(contract.OffloadModes, contract.OffloadMode(f.offloadMode)) {
		errs = append(errs, fmt.Errorf("--offload %q: want one of %v", f.offloadMode, contract.OffloadModes))
	} else if f.compactors == 0 && contract.OffloadMode(f.offloadMode) == contract.OffloadRequired {
		errs = append(errs, errors.New("--offload Required needs compactors: give --compactors 1 or more"))
	}
	if !slices.Contains(contract.MemstorePolicies, contract.MemstorePolicy(f.memstorePolicy)) {
		errs = append(errs, fmt.Errorf("--%s %q: want one of %v", contract.FlagMemstorePolicy, f.memstorePolicy, contract.MemstorePolicies))
	}
	if _, err := autoscaler.ParseBytes(f.cacheBytes); err != nil {
		errs = append(errs, fmt.Errorf("--cache-bytes %q: %v", f.cacheBytes, err))
	}
	if f.splitBytes != "" {
		if _, err := autoscaler.ParseBytes(f.splitBytes); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %v", contract.FlagSplitBytes, f.splitBytes, err))
		}
	}
	return errors.Join(errs...)
}

// storeSplitBytes is the store's split size: --split-bytes, or half of
// each compactor's cache (m/2) so that a region's major compaction stays
// offloadable (docs/regions.md).
func (f *localFlags) storeSplitBytes() int64 {
	if f.splitBytes != "" {
		n, _ := autoscaler.ParseBytes(f.splitBytes)
		return int64(n)
	}
	m, _ := autoscaler.ParseBytes(f.cacheBytes)
	return max(int64(m/2), contract.MinMemstoreBytes)
}

// lockDataDir takes the data directory for this process, or says which
// process has it. The lock dies with the process, so a crashed run leaves
// nothing to clean up.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, localLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &userError{
				what: fmt.Sprintf("--data-dir %s is in use by another bellows local (pid %s) or the processes it started", dir, strings.TrimSpace(string(pid))),
				hint: "stop that one first (Ctrl-C in its terminal; its store and compactors stop with it), or give this one another --data-dir",
			}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// needsCreate reports whether the store must be told to create the
// cluster (--create-bucket), or refuses a data directory that holds no
// cluster unless that was asked for: a mistyped --data-dir would otherwise
// start an empty store beside the real one.
func (f *localFlags) needsCreate(bucket string) (bool, error) {
	for _, p := range []string{contract.BucketMarker, "regions"} {
		if _, err := os.Stat(filepath.Join(bucket, p)); err == nil {
			return false, nil // a cluster (from before markers, with regions/ only)
		}
	}
	if f.createBucket || filepath.Clean(f.dataDir) == defaultLocalDataDir {
		return true, nil
	}
	return false, &userError{
		what: fmt.Sprintf("--data-dir %s holds no bellows local cluster (no %s)", f.dataDir, filepath.Join(bucket, contract.BucketMarker)),
		hint: fmt.Sprintf("a mistyped directory? Give --%s to start a new, empty cluster there (only %s, the default, gets one without asking)",
			contract.FlagCreateBucket, defaultLocalDataDir),
	}
}

// listenFree says, before anything starts, that the store's --listen
// address is taken, and which nearby port is free. bellows local does not
// move to a free port by itself: bellows kv and backup call 127.0.0.1:7400
// unless told otherwise, and would reach the cluster that holds the port
// (the first of two, when a second is started to check a restore) without
// a word.
func listenFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil // the store says why, with its log
	}
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	hint := "stop what listens there (another bellows local: Ctrl-C in its terminal), or give this one another address with --listen HOST:PORT"
	for next := p + 10; p > 0 && next < p+200 && next < 65536; next += 10 {
		free := net.JoinHostPort(host, strconv.Itoa(next))
		if l, err := net.Listen("tcp", free); err == nil {
			_ = l.Close()
			hint = fmt.Sprintf("stop what listens there (another bellows local: Ctrl-C in its terminal), or run this one beside it with --listen %s (free now) "+
				"and give bellows kv and backup create --addr %s to reach it", free, free)
			break
		}
	}
	return &userError{what: fmt.Sprintf("--listen %s: the address is in use, by another bellows local (make run) or another program", addr), hint: hint, cause: err}
}

// invokedAs is this binary as the user ran it, for a command line to
// copy: os.Args[0], relative to the working directory when it lies below
// it (make run runs $PWD/bin/bellows: bin/bellows), or "bellows" when it
// was found on PATH.
func invokedAs() string {
	arg := os.Args[0]
	if !filepath.IsAbs(arg) {
		return arg
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, arg); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			if !strings.ContainsRune(rel, filepath.Separator) {
				rel = "." + string(filepath.Separator) + rel
			}
			return rel
		}
	}
	if path, err := exec.LookPath(filepath.Base(arg)); err == nil && path == arg {
		return filepath.Base(arg)
	}
	return arg
}

func newLocalCommand() *cobra.Command {
	f := &localFlags{}
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run the embedded default: one store and N compactors as separate processes on 127.0.0.1",
		Long: "Starts N `bellows compactor` processes and one `bellows store` (re-executing this binary) on 127.0.0.1,\n" +
			"with a file:// bucket and the WALs under --data-dir, prints their addresses, and stops them on SIGINT/SIGTERM.\n" +
			"One bellows local at a time uses a data directory; each process's log is appended to under its logs/.\n" +
			"A data directory other than " + defaultLocalDataDir + " must hold a cluster already, or be given --" + contract.FlagCreateBucket + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.validate(); err != nil {
				return err
			}
			if err := listenFree(f.storeListen); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			abs, err := filepath.Abs(f.dataDir)
			if err != nil {
				return err
			}
			bucket := filepath.Join(abs, "bucket")
			create, err := f.needsCreate(bucket)
			if err != nil {
				return err
			}
			logDir := filepath.Join(abs, "logs")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				return err
			}
			lock, err := lockDataDir(abs)
			if err != nil {
				return err
			}
			defer lock.Close()
			// The children hold the lock too: after a crash of this
			// process the directory is free only once they are gone.
			hold := []*os.File{lock}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if create {
				fmt.Fprintf(out, "new cluster in %s\n", abs)
			}
			var tlsArgs []string
			metricsScheme := "http"
			if f.tls {
				metricsScheme = "https" // with the client certificate, e.g. curl --cert, --key, --cacert

				nodeDir, clientDir, err := localTLS(abs)
				if err != nil {
					return err
				}
				tlsArgs = []string{contract.Arg(contract.FlagTLSDir, nodeDir)}
				fmt.Fprintf(out, "%-12s mutual TLS; the CLI's certificate: %s (bellows kv and backup on this machine find it; elsewhere give --tls-dir)\n", "tls", clientDir)
			}
			var procs []*childproc.Child
			stopAll := func() {
				// Store first: it may be waiting on a compactor.
				for i := len(procs) - 1; i >= 0; i-- {
					procs[i].Stop()
				}
				procs = nil
			}
			defer stopAll()
			var addrs []string
			for i := range f.compactors {
				name := fmt.Sprintf("compactor-%d", i)
				c, err := childproc.StartHolding(ctx, hold, self, name, logDir, append([]string{"compactor", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
					"--name=" + name, "--cache-bytes=" + f.cacheBytes}, tlsArgs...)...)
				if err != nil {
					return err
				}
				procs = append(procs, c)
				addrs = append(addrs, c.GRPC)
				fmt.Fprintf(out, "%-12s grpc=%s metrics=%s://%s/metrics log=%s\n", name, c.GRPC, metricsScheme, c.Metrics, c.Log)
			}
			args := []string{"store", "--listen=" + f.storeListen, "--metrics-listen=127.0.0.1:0",
				"--bucket=file://" + bucket, "--wal-dir=" + filepath.Join(abs, "wal"),
				fmt.Sprintf("--regions=%d", f.regions), "--compactors=" + strings.Join(addrs, ","), "--offload=" + f.offloadMode,
				"--" + contract.FlagMemstorePolicy + "=" + f.memstorePolicy,
				fmt.Sprintf("--%s=%d", contract.FlagSplitBytes, f.storeSplitBytes())}
			if create {
				args = append(args, "--"+contract.FlagCreateBucket)
			}
			args = append(args, tlsArgs...)
			s, err := childproc.StartHolding(ctx, hold, self, "store", logDir, args...)
			if err != nil {
				return err
			}
			procs = append(procs, s)
			fmt.Fprintf(out, "%-12s grpc=%s metrics=%s://%s/metrics log=%s\n", "store", s.GRPC, metricsScheme, s.Metrics, s.Log)
			fmt.Fprintf(out, "ready; try: %s kv put hello world --addr %s; Ctrl-C stops everything\n", invokedAs(), s.GRPC)
			select {
			case <-ctx.Done():
				stopAll()
				fmt.Fprintln(out, "bellows local: stopped")
				return nil
			case err := <-childproc.FirstExit(procs):
				return err
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", defaultLocalDataDir, "directory for the bucket, WALs and logs")
	fl.StringVar(&f.storeListen, "listen", defaultStoreAddr, "the store's gRPC address")
	fl.IntVar(&f.compactors, "compactors", 2, "number of compactor processes (0: compactions run in the store)")
	fl.IntVar(&f.regions, "regions", int(contract.DefaultRegionCount), "regions the store starts with (a new cluster's; they split as data grows)")
	fl.StringVar(&f.splitBytes, contract.FlagSplitBytes, "", "split a region whose data passes this size (default: half of --cache-bytes, so a region's major compaction fits a worker)")
	fl.StringVar(&f.offloadMode, "offload", string(contract.DefaultOffload), "Required, Preferred or Disabled")
	fl.StringVar(&f.cacheBytes, "cache-bytes", "1GiB", "each compactor's cache")
	fl.StringVar(&f.memstorePolicy, contract.FlagMemstorePolicy, string(contract.DefaultMemstorePolicy), fmt.Sprintf("the store's in-memory compaction policy, one of %v", contract.MemstorePolicies))
	fl.BoolVar(&f.tls, "tls", true, "serve mutual TLS, with certificates from a throwaway CA bellows local makes once in the user's configuration directory (--tls=false: plaintext)")
	fl.BoolVar(&f.createBucket, contract.FlagCreateBucket, false,
		"start a new, empty cluster if --data-dir holds none (the default "+defaultLocalDataDir+" needs no flag)")
	return cmd
}
