package store

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

var readyLine = regexp.MustCompile(`^bellows \S+ ready grpc=(\S+) metrics=(\S+)`)

// A store started through Run opens its regions on files its compaction
// policy merges: each region's open schedules a compaction, which asks the
// offload executor for the job's size (InputBytes) and, to place it on a
// worker, for the store's regions (Regions), while the other regions are
// still opening and OpenStore has not returned. Those callbacks read the
// store Run is about to be handed: under `make race` this test is what
// catches a read of it that is not synchronised with that assignment
// (issue #50). The worker is unreachable, so every job runs here after its
// attempt; the store then serves what it held before the restart.
func TestAStoreStartsWhileItsRegionsCompactThroughTheOffload(t *testing.T) {
	dir := t.TempDir()
	const regions = 8
	cfg := Default()
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Bucket, cfg.CreateBucket, cfg.WALDir = "file://"+dir+"/bucket", true, dir+"/wal"
	cfg.Regions = regions
	cfg.SplitBytes, cfg.SplitQPS, cfg.MergeBytes = 0, 0, 0
	cfg.MaxClockOffset = 0

	// The first run writes three files per region and compacts nothing.
	first := cfg
	first.OffloadOverride = contract.OffloadDisabled
	first.Engine.Compaction.MinFiles, first.Engine.Compaction.MaxFiles = 100, 100
	addr, _, stop := runStore(t, first)
	conn := dialStore(t, addr)
	kv, admin := kvpb.NewKVClient(conn), kvpb.NewAdminClient(conn)
	ctx := context.Background()
	for f := 0; f < 3; f++ {
		for r := 0; r < regions; r++ {
			for i := 0; i < 20; i++ {
				key := fmt.Appendf([]byte{byte(256 * r / regions)}, "k%02d", i)
				if _, err := kv.Put(ctx, &kvpb.PutRequest{Key: key, Value: fmt.Appendf(nil, "v%d", f)}); err != nil {
					t.Fatalf("put %q: %v", key, err)
				}
			}
		}
		if _, err := admin.Flush(ctx, &kvpb.FlushRequest{}); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
	_ = conn.Close()
	if err := stop(); err != nil {
		t.Fatalf("the first run ended with %v", err)
	}

	// The second run compacts them as its regions open, offloading first.
	second := cfg
	second.OffloadOverride = contract.OffloadPreferred
	second.Compactors = []string{unreachable(t)}
	second.Engine.Compaction.MinFiles = 2
	addr, metrics, stop := runStore(t, second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		local := metricValue(t, metrics, `bellows_compactions_total{location="local",result="success"}`)
		if local >= regions {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v regions compacted in this store, want %d", local, regions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := metricValue(t, metrics, `bellows_compaction_attempts_total{worker_outcome="unavailable"}`); n == 0 {
		t.Error("no job was offered to the worker: the executor never placed one (Regions)")
	}
	conn = dialStore(t, addr)
	kv = kvpb.NewKVClient(conn)
	for r := 0; r < regions; r++ {
		key := fmt.Appendf([]byte{byte(256 * r / regions)}, "k%02d", 7)
		got, err := kv.Get(ctx, &kvpb.GetRequest{Key: key})
		if err != nil || string(got.GetValue()) != "v2" {
			t.Errorf("get %q = %q, %v; want v2", key, got.GetValue(), err)
		}
	}
	_ = conn.Close()
	if err := stop(); err != nil {
		t.Fatalf("the second run ended with %v", err)
	}
}

// runStore starts Run in this process and waits for its ready line: the
// gRPC and metrics addresses, and a stop that ends the run and returns its
// error.
func runStore(t *testing.T, cfg Config) (grpcAddr, metricsAddr string, stop func() error) {
	t.Helper()
	if err := cfg.LoadEngineConfig(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), w); _ = w.Close() }()
	var once bool
	var runErr error
	stop = func() error {
		if !once {
			once = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return m[1], m[2], stop
		}
	}
	t.Fatalf("the store exited before it was ready: %v", stop())
	return "", "", nil
}

func dialStore(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// unreachable is an address nothing listens on: a port that was free a
// moment ago.
func unreachable(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// metricValue is a sample's value on the store's /metrics (0 when absent).
func metricValue(t *testing.T, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sample, err)
			}
			return f
		}
	}
	return 0
}
