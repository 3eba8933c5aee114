// Package process tests real bellows processes: a store and compactors
// started from the built binary on 127.0.0.1, real gRPC, a real file://
// bucket, faults injected with SIGKILL. Tests wait on observable state
// (Status, /metrics, RPC results), never on sleeps.
package process

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bellows-process-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "bellows")
	build := exec.Command("go", "build", "-o", binary, "github.com/bellows-kv/bellows/cmd/bellows")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building bellows:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running bellows process.
type proc struct {
	name          string
	grpc, metrics string
	cmd           *exec.Cmd
	stderr        *syncBuffer
	exited        chan struct{}
	conn          *grpc.ClientConn
	// tlsDir is its --tls-dir ("" without): its /metrics is then HTTPS,
	// read with its own (node) certificate.
	tlsDir string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var readyLine = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=(\S+)$`)

// start runs `bellows args...` on free ports (the gRPC one unless args set
// --listen) and waits for its ready line.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startVia(t, name, nil, args...)
}

// startVia is start with the binary run by a command prefix (a shell that
// joins a cgroup first); none runs it directly.
func startVia(t *testing.T, name string, prefix []string, args ...string) *proc {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--listen=") }) {
		args = append(args, "--listen=127.0.0.1:0")
	}
	args = append(args, "--metrics-listen=127.0.0.1:0")
	argv := append(append(slices.Clone(prefix), binary), args...)
	p := &proc{name: name, cmd: exec.Command(argv[0], argv[1:]...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	for _, a := range args {
		if dir, ok := strings.CutPrefix(a, "--tls-dir="); ok {
			p.tlsDir = dir
		}
	}
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s stderr ---\n%s", name, p.stderr.String())
		}
	})
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case m := <-ready:
		p.grpc, p.metrics = m[1], m[2]
	case <-p.exited:
		t.Fatalf("%s exited before it was ready:\n%s", name, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready in 60s:\n%s", name, p.stderr.String())
	}
	p.conn, err = grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.conn.Close() })
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// terminate sends SIGTERM and waits for a graceful exit.
func (p *proc) terminate() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.exited
	}
}

func (p *proc) kv() kvpb.KVClient                    { return kvpb.NewKVClient(p.conn) }
func (p *proc) admin() kvpb.AdminClient              { return kvpb.NewAdminClient(p.conn) }
func (p *proc) worker() compactionpb.CompactorClient { return compactionpb.NewCompactorClient(p.conn) }

func (p *proc) status(t *testing.T) *compactionpb.StatusResponse {
	t.Helper()
	st, err := p.worker().Status(context.Background(), &compactionpb.StatusRequest{})
	if err != nil {
		t.Fatalf("%s Status: %v", p.name, err)
	}
	return st
}

// metric reads one sample from /metrics; series is the name with its labels
// exactly as exposed, e.g. bellows_compactions_total{location="remote",result="success"}.
func (p *proc) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := p.httpClient(t).Get(p.metricsURL() + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", series, line)
			}
			return f
		}
	}
	t.Fatalf("%s exposes no %s", p.name, series)
	return 0
}

// metricsURL is the scheme and address of p's HTTP port.
func (p *proc) metricsURL() string {
	if p.tlsDir != "" {
		return "https://" + p.metrics
	}
	return "http://" + p.metrics
}

// httpClient reads p's HTTP port: with p's own certificate when it serves TLS.
func (p *proc) httpClient(t *testing.T) *http.Client {
	t.Helper()
	if p.tlsDir == "" {
		return http.DefaultClient
	}
	cfg, err := tlsconfig.ClientConfig(p.tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, what, 60*time.Second, 5*time.Millisecond, cond)
}

// waitWithin polls cond every interval until it holds, failing the test
// after limit.
func waitWithin(t *testing.T, what string, limit, every time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(every) // polling interval, not synchronisation
	}
}
