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

// Start runs binary with args, its stderr in logDir/name.log, and waits for
// its ready line.
func Start(ctx context.Context, binary, name, logDir string, args ...string) (*Child, error) {
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c := &Child{Name: name, Log: logPath, Cmd: exec.Command(binary, args...), exited: make(chan error, 1)}
	c.Cmd.Stderr = logf
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
