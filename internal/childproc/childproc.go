// Package childproc starts bellows role processes (`bellows store`,
// `bellows compactor`) as children and waits for their ready line: what
// `bellows local` and the benchmark driver share.
package childproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Child is a running bellows role process.
type Child struct {
	Name, Log     string
	GRPC, Metrics string
	Cmd           *exec.Cmd
	exited        chan error
}

// readyLine is what serve.Servers.Run prints once both listeners serve.
var readyLine = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=(\S+)$`)

// ReadyTimeout bounds how long Start waits for the ready line.
const ReadyTimeout = 30 * time.Second

// MaxLogBytes is the size past which Start moves a log to NAME.log.1 (one
// older generation kept) instead of appending to it.
const MaxLogBytes = 16 << 20

// Start runs binary with args, its stderr appended to logDir/name.log, and
// waits for its ready line. A child that exits says why: its error carries
// the end of what this run logged.
func Start(ctx context.Context, binary, name, logDir string, args ...string) (*Child, error) {
	return StartHolding(ctx, nil, binary, name, logDir, args...)
}

// StartHolding is Start with files the child inherits and keeps open until
// it exits: bellows local's lock on its data directory, so a directory
// whose parent died is not taken while its children still run.
func StartHolding(ctx context.Context, hold []*os.File, binary, name, logDir string, args ...string) (*Child, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, from, err := openLog(logPath, name)
	if err != nil {
		return nil, err
	}
	c := &Child{Name: name, Log: logPath, Cmd: exec.Command(binary, args...), exited: make(chan error, 1)}
	c.Cmd.Stderr = logf
	c.Cmd.ExtraFiles = hold
	setParentDeathSignal(c.Cmd)
	stdout, err := c.Cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		err := c.Cmd.Wait()
		_ = logf.Close()
		c.exited <- exitError(name, err, logPath, from)
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
	timeout := time.After(ReadyTimeout)
	for {
		select {
		case l := <-lines:
			if m := readyLine.FindStringSubmatch(l); m != nil {
				c.GRPC, c.Metrics = m[1], m[2]
				return c, nil
			}
		case err := <-c.exited:
			return nil, err
		case <-timeout:
			c.Stop()
			return nil, fmt.Errorf("%s did not become ready in %v (see %s)", name, ReadyTimeout, logPath)
		case <-ctx.Done():
			c.Stop()
			return nil, ctx.Err()
		}
	}
}

// Stop sends SIGTERM and waits; SIGKILL after 30s.
func (c *Child) Stop() {
	if c.Cmd.Process == nil {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.Cmd.Process.Kill()
		<-c.exited
	}
}

// FirstExit reports the first of children to exit.
func FirstExit(children []*Child) <-chan error {
	ch := make(chan error, len(children))
	for _, p := range children {
		go func() { ch <- <-p.exited; p.exited <- nil }()
	}
	return ch
}

// Kill sends SIGKILL and waits for the exit: a crash, nothing flushed or
// released.
func (c *Child) Kill() {
	if c.Cmd.Process == nil {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// openLog opens path for appending, after a line that starts this run:
// an earlier run's log (a crash's, say) stays above it. A log past
// MaxLogBytes is moved to path.1 first. from is where this run's lines
// begin.
func openLog(path, name string) (f *os.File, from int64, err error) {
	if st, err := os.Stat(path); err == nil && st.Size() > MaxLogBytes {
		if err := os.Rename(path, path+".1"); err != nil {
			return nil, 0, err
		}
	}
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, err
	}
	if _, err := fmt.Fprintf(f, "---- %s started %s by pid %d ----\n", name, time.Now().Format(time.RFC3339), os.Getpid()); err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	if from, err = f.Seek(0, io.SeekEnd); err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, from, nil
}

// TailLines is how many of a child's last log lines its exit error quotes.
const TailLines = 8

func exitError(name string, err error, logPath string, from int64) error {
	tail := Tail(logPath, from, TailLines)
	if tail == "" {
		return fmt.Errorf("%s exited: %v, logging nothing (%s)", name, err, logPath)
	}
	return fmt.Errorf("%s exited: %v; its log (%s) ends:\n%s", name, err, logPath, tail)
}

// Tail is the last n non-empty lines of path from offset on, indented.
func Tail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	// The end is enough: the cause is in the last lines.
	const window = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size()-offset > window {
		offset = st.Size() - window
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	data, _ := io.ReadAll(f)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, "  "+l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
