package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func newLocalCommand() *cobra.Command {
	var dataDir, storeListen, offloadMode, cacheBytes string
	var compactors, regions int
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Run the embedded default: one store and N compactors as separate processes on 127.0.0.1",
		Long: "Starts N `bellows compactor` processes and one `bellows store` (re-executing this binary) on 127.0.0.1,\n" +
			"with a file:// bucket and the WALs under --data-dir, prints their addresses, and stops them on SIGINT/SIGTERM.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			abs, err := filepath.Abs(dataDir)
			if err != nil {
				return err
			}
			logDir := filepath.Join(abs, "logs")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var procs []*child
			defer func() {
				// Store first: it may be waiting on a compactor.
				for i := len(procs) - 1; i >= 0; i-- {
					procs[i].stop()
				}
			}()
			var addrs []string
			for i := range compactors {
				name := fmt.Sprintf("compactor-%d", i)
				c, err := startChild(ctx, name, logDir, "compactor", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
					"--name="+name, "--cache-bytes="+cacheBytes)
				if err != nil {
					return err
				}
				procs = append(procs, c)
				addrs = append(addrs, c.grpc)
				fmt.Fprintf(out, "%-12s grpc=%s metrics=http://%s/metrics log=%s\n", name, c.grpc, c.metrics, c.log)
			}
			s, err := startChild(ctx, "store", logDir, "store", "--listen="+storeListen, "--metrics-listen=127.0.0.1:0",
				"--bucket=file://"+filepath.Join(abs, "bucket"), "--wal-dir="+filepath.Join(abs, "wal"),
				fmt.Sprintf("--regions=%d", regions), "--compactors="+strings.Join(addrs, ","), "--offload="+offloadMode)
			if err != nil {
				return err
			}
			procs = append(procs, s)
			fmt.Fprintf(out, "%-12s grpc=%s metrics=http://%s/metrics log=%s\n", "store", s.grpc, s.metrics, s.log)
			fmt.Fprintf(out, "ready; try: bellows kv put hello world --addr %s; Ctrl-C stops everything\n", s.grpc)
			select {
			case <-ctx.Done():
				return nil
			case err := <-firstExit(procs):
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "bellows-data", "directory for the bucket, WALs and logs")
	f.StringVar(&storeListen, "listen", "127.0.0.1:7400", "the store's gRPC address")
	f.IntVar(&compactors, "compactors", 2, "number of compactor processes")
	f.IntVar(&regions, "regions", 4, "regions of the store")
	f.StringVar(&offloadMode, "offload", "Preferred", "Required, Preferred or Disabled")
	f.StringVar(&cacheBytes, "cache-bytes", "1GiB", "each compactor's cache")
	return cmd
}

// child is a bellows process started by local.
type child struct {
	name, log     string
	grpc, metrics string
	cmd           *exec.Cmd
	exited        chan error
}

var readyLine = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=(\S+)$`)

// startChild re-executes this binary and waits for its ready line.
func startChild(ctx context.Context, name, logDir string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &child{name: name, log: logPath, cmd: exec.Command(self, args...), exited: make(chan error, 1)}
	c.cmd.Stderr = logf
	setParentDeathSignal(c.cmd)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		err := c.cmd.Wait()
		_ = logf.Close()
		c.exited <- fmt.Errorf("%s exited: %v (see %s)", name, err, logPath)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l := <-lines:
			if m := readyLine.FindStringSubmatch(l); m != nil {
				c.grpc, c.metrics = m[1], m[2]
				return c, nil
			}
		case err := <-c.exited:
			return nil, err
		case <-timeout:
			c.stop()
			return nil, fmt.Errorf("%s did not become ready in 30s (see %s)", name, logPath)
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		}
	}
}

// stop sends SIGTERM and waits; SIGKILL after 30s.
func (c *child) stop() {
	if c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func firstExit(procs []*child) <-chan error {
	ch := make(chan error, len(procs))
	for _, p := range procs {
		go func() { ch <- <-p.exited; p.exited <- nil }()
	}
	return ch
}
