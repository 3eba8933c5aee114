package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
)

// startStore runs `bellows store` in this process (4 regions split by first
// byte, no compactors) and returns its gRPC address; it stops with the test.
func startStore(t *testing.T) string {
	t.Helper()
	return startStoreIn(t, t.TempDir())
}

// startStoreIn is startStore with its bucket (dir/bucket) and WAL in dir.
func startStoreIn(t *testing.T, dir string) string {
	t.Helper()
	return runStore(t, "--bucket=file://"+filepath.Join(dir, "bucket"), "--wal-dir="+filepath.Join(dir, "wal"), "--listen=127.0.0.1:0")
}

// runStore runs `bellows store ARGS` in this process (4 regions, no
// compactors, and args, which give at least its bucket, WAL directory and
// address) and returns its gRPC address; it stops with the test.
func runStore(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	root := NewRootCommand()
	root.SetArgs(append([]string{"store", "--metrics-listen=127.0.0.1:0", "--offload=Disabled", "--regions=4", "--" + contract.FlagCreateBucket}, args...))
	root.SetOut(pw)
	var logs syncBuffer
	root.SetErr(&logs)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); _ = pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("store: %v\n%s", err, logs.String())
		}
	})
	ready := regexp.MustCompile(`^bellows store ready grpc=(\S+) `)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := ready.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			return m[1]
		}
	}
	t.Fatalf("the store exited before it was ready:\n%s", logs.String())
	return ""
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

// kvRun runs `bellows kv ARGS --addr addr` in this process.
type kvRun struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer // as well as the returned string
}

func (r kvRun) run(t *testing.T, addr string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := NewRootCommand()
	root.SetArgs(append(append([]string{"kv"}, args...), "--addr", addr))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	if r.stdout != nil {
		root.SetOut(r.stdout)
	}
	root.SetErr(&errOut)
	if r.stderr != nil {
		root.SetErr(io.MultiWriter(&errOut, r.stderr))
	}
	root.SetIn(strings.NewReader(""))
	if r.stdin != nil {
		root.SetIn(r.stdin)
	}
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func kv(t *testing.T, addr string, args ...string) string {
	t.Helper()
	out, errOut, err := kvRun{}.run(t, addr, args...)
	if err != nil {
		t.Fatalf("kv %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func kvFails(t *testing.T, addr string, args ...string) error {
	t.Helper()
	_, _, err := kvRun{}.run(t, addr, args...)
	if err == nil {
		t.Fatalf("kv %s succeeded, want an error", strings.Join(args, " "))
	}
	return err
}

// jsonValue is the value of `kv get -o json`.
func jsonValue(t *testing.T, out string) []byte {
	t.Helper()
	var doc struct{ Key, Value string }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	v, err := base64.StdEncoding.DecodeString(doc.Value)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestKVValuesFromFilesAndStdin(t *testing.T) {
	addr := startStore(t)
	// The largest value, binary: through a file, exactly, both ways (also
	// past gRPC's default 4 MiB message size).
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, client.MaxValueBytes/4)
	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, big, 0o644); err != nil {
		t.Fatal(err)
	}
	kv(t, addr, "put", "big", "--value-file", file)
	if got := jsonValue(t, kv(t, addr, "get", "big", "-o", "json")); !bytes.Equal(got, big) {
		t.Fatalf("get big: %d bytes back, want the %d written", len(got), len(big))
	}
	// Standard input: with --value-file -, and piped with no VALUE.
	if _, _, err := (kvRun{stdin: strings.NewReader("from\nstdin")}).run(t, addr, "put", "a", "--value-file", "-"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := (kvRun{stdin: strings.NewReader("piped")}).run(t, addr, "put", "b"); err != nil {
		t.Fatal(err)
	}
	if got := kv(t, addr, "get", "a"); got != "from\nstdin" {
		t.Fatalf("get a = %q", got)
	}
	if got := kv(t, addr, "get", "b"); got != "piped" {
		t.Fatalf("get b = %q", got)
	}
	// One byte past the limit: refused before anything is sent, naming it.
	_, _, err := (kvRun{stdin: bytes.NewReader(append(big, 'x'))}).run(t, addr, "put", "c")
	if !errors.Is(err, client.ErrValueTooLarge) || !strings.Contains(err.Error(), "4.0 MiB") {
		t.Fatalf("put of MaxValueBytes+1: %v, want ErrValueTooLarge naming 4.0 MiB", err)
	}
	if err := kvFails(t, addr, "get", "c"); !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get c: %v", err)
	}
	if err := kvFails(t, addr, "put", "d", "v", "--value-file", file); !strings.Contains(err.Error(), "not both") {
		t.Fatalf("put with VALUE and --value-file: %v", err)
	}
	if err := kvFails(t, addr, "put", "", "v"); !errors.Is(err, client.ErrEmptyKey) {
		t.Fatalf("put of the empty key: %v", err)
	}
}

func TestKVHexAndOutputFormats(t *testing.T) {
	addr := startStore(t)
	kv(t, addr, "put", "--hex", "00ff", "0a1b")
	kv(t, addr, "put", "hello", "world")
	if got := kv(t, addr, "get", "--hex", "00ff"); got != "0a1b\n" {
		t.Fatalf("get --hex 00ff = %q", got)
	}
	if got := kv(t, addr, "scan", "--hex"); got != "00ff\t0a1b\n68656c6c6f\t776f726c64\n" {
		t.Fatalf("scan --hex = %q", got)
	}
	lines := strings.Split(strings.TrimSpace(kv(t, addr, "scan", "-o", "json")), "\n")
	if len(lines) != 2 || lines[1] != `{"key":"aGVsbG8=","value":"d29ybGQ="}` {
		t.Fatalf("scan -o json = %q", lines)
	}
	if got := kv(t, addr, "scan", "-o", "json", "--hex", "61"); got != `{"key":"68656c6c6f","value":"776f726c64"}`+"\n" {
		t.Fatalf("scan -o json --hex = %q", got)
	}
	table := kv(t, addr, "scan", "-o", "table")
	if !regexp.MustCompile(`^KEY +VALUE\n\\x00\\xff +\\n\\x1b\nhello +world\n$`).MatchString(table) {
		t.Fatalf("scan -o table =\n%s", table)
	}
	if got := kv(t, addr, "put", "k", "v", "-o", "json"); !regexp.MustCompile(`^\{"commit_ts":\d+,"region":"region-001"\}\n$`).MatchString(got) {
		t.Fatalf("put -o json = %q", got)
	}
	if err := kvFails(t, addr, "get", "--hex", "zz"); !strings.Contains(err.Error(), `KEY "zz" is not hexadecimal`) {
		t.Fatalf("get --hex zz: %v", err)
	}
	if err := kvFails(t, addr, "scan", "-o", "yaml"); !strings.Contains(err.Error(), "want one of text, json, table") {
		t.Fatalf("-o yaml: %v", err)
	}
}

func TestKVScanOfAnInvertedRangeFails(t *testing.T) {
	addr := startStore(t)
	err := kvFails(t, addr, "scan", "z", "a")
	if !errors.Is(err, client.ErrInvalidRange) || !strings.Contains(err.Error(), `START "z" is after END "a"`) {
		t.Fatalf("scan z a: %v", err)
	}
}

// freeAddr is an address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestKVRefusedConnectionFailsFast(t *testing.T) {
	addr := freeAddr(t)
	began := time.Now()
	_, _, err := kvRun{}.run(t, addr, "get", "k", "--timeout", "5m")
	if err == nil || !strings.Contains(err.Error(), "cannot connect to "+addr+": connection refused") || !strings.Contains(err.Error(), "hint:") {
		t.Fatalf("get from %s: %v, want it to say the connection was refused and what to do", addr, err)
	}
	if took := time.Since(began); took > time.Minute {
		t.Fatalf("took %v: waited for the timeout instead of failing at once", took)
	}
}

func TestParseSeedsGivesTheStorePort(t *testing.T) {
	port := fmt.Sprint(contract.StoreGRPCPort)
	for in, want := range map[string]string{
		"127.0.0.1":             "127.0.0.1:" + port,
		"localhost":             "localhost:" + port,
		"::1":                   "[::1]:" + port,
		"[::1]":                 "[::1]:" + port,
		"a:1, b":                "a:1,b:" + port,
		"demo.ns.svc:7401":      "demo.ns.svc:7401",
		"127.0.0.1:7400,,x:123": "127.0.0.1:7400,x:123",
	} {
		got, err := parseSeeds(in)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("parseSeeds(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ":7400", "h:port", "h:99999"} {
		if _, err := parseSeeds(in); err == nil {
			t.Errorf("parseSeeds(%q) succeeded", in)
		}
	}
}

func TestKVTimeoutZeroMeansNone(t *testing.T) {
	addr := startStore(t)
	kv(t, addr, "put", "k", "v", "--timeout", "0s")
	if got := kv(t, addr, "get", "k", "--timeout", "0"); got != "v" {
		t.Fatalf("get --timeout 0 = %q", got)
	}
	if err := kvFails(t, addr, "get", "k", "--timeout", "-1s"); !strings.Contains(err.Error(), "--timeout -1s: must be 0 (no timeout) or more") {
		t.Fatalf("--timeout -1s: %v", err)
	}
}

// cancelAfterFirstLine cancels the command's context once the first line
// is out: a scan stopped there as by its timeout or Ctrl-C.
type cancelAfterFirstLine struct {
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelAfterFirstLine) Write(p []byte) (int, error) {
	defer w.cancel()
	return w.buf.Write(p)
}

func (w *cancelAfterFirstLine) String() string { return w.buf.String() }

func TestKVStoppedScanSaysWhereToResume(t *testing.T) {
	addr := startStore(t)
	// Keys in two regions (split by first byte: '0' in region-000, 'k'
	// in region-001), so the scan must open a second stream after the stop.
	for _, k := range []string{"0a", "0b", "0c", "k1", "k2"} {
		kv(t, addr, "put", k, "v"+k)
	}
	want := kv(t, addr, "scan", "0", "z")
	ctx, cancel := context.WithCancel(context.Background())
	out := &cancelAfterFirstLine{cancel: cancel}
	_, stderr, err := kvRun{ctx: ctx, stdout: out}.run(t, addr, "scan", "0", "z")
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("the stopped scan: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr)
	}
	m := regexp.MustCompile(`resume with: bellows kv scan --after '([^']*)' 'z'\n`).FindStringSubmatch(stderr)
	if m == nil || !strings.Contains(stderr, "resume key (the next key to start from): ") {
		t.Fatalf("stderr of the stopped scan lacks the resume key and command:\n%s", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if last := strings.Split(lines[len(lines)-1], "\t")[0]; m[1] != last {
		t.Fatalf("resume after %q, but the last key printed was %q", m[1], last)
	}
	rest := kv(t, addr, "scan", "--after", m[1], "z")
	if out.String()+rest != want {
		t.Fatalf("stopped scan + resumed scan =\n%s%s\nwant\n%s", out.String(), rest, want)
	}
}

// fakePairs yields pairs, then fails with err.
type fakePairs struct {
	keys [][]byte
	i    int
	err  error
}

func (f *fakePairs) Next() bool    { f.i++; return f.i <= len(f.keys) }
func (f *fakePairs) Key() []byte   { return f.keys[f.i-1] }
func (f *fakePairs) Value() []byte { return []byte("v") }
func (f *fakePairs) Err() error    { return f.err }

func TestResumeOfABinaryKeyIsInHex(t *testing.T) {
	p, err := newPrinter(io.Discard, "text", codec{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	it := &fakePairs{keys: [][]byte{[]byte("a"), {0x00, 'b', 0x07}}, err: context.DeadlineExceeded}
	if err := printScan(&stderr, p, it, scanRange{end: []byte("z")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("printScan: %v", err)
	}
	for _, want := range []string{`scan stopped after 2 keys; resume key (the next key to start from): "\x00b\a\x00"`,
		"resume with: bellows kv scan --hex --after 006207 7a\n"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

func TestKVFlushOfAnUnknownRegionListsTheRegions(t *testing.T) {
	addr := startStore(t)
	err := kvFails(t, addr, "flush", "region-999")
	if !strings.Contains(err.Error(), `no region "region-999": the cluster's regions are region-000, region-001, region-002, region-003`) {
		t.Fatalf("flush region-999: %v", err)
	}
	if got := kv(t, addr, "flush", "region-002"); got != "OK flushed region-002\n" {
		t.Fatalf("flush region-002 = %q", got)
	}
}

func TestKVStatus(t *testing.T) {
	addr := startStore(t)
	out := kv(t, addr, "status")
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(addr) + `\thealthy\t4 regions: region-000,region-001,region-002,region-003\t\d+ms\n$`).MatchString(out) {
		t.Fatalf("status = %q", out)
	}
	var doc storeStatus
	if err := json.Unmarshal([]byte(kv(t, addr, "health", "-o", "json")), &doc); err != nil || !doc.Healthy || len(doc.Regions) != 4 {
		t.Fatalf("health -o json: %+v, %v", doc, err)
	}
	down := freeAddr(t)
	stdout, _, err := kvRun{}.run(t, addr+","+down, "status")
	if err == nil || !strings.Contains(err.Error(), "1 of 2 stores did not answer") || !strings.Contains(stdout, down+"\tunhealthy\tconnection refused") {
		t.Fatalf("status with a store down: %v\n%s", err, stdout)
	}
}

func TestExplainSaysWhatWentWrongAndWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		err        error
		what, hint string
	}{
		{status.Error(codes.Unavailable, "region-001 is opening"), "region-001 is opening", "retry"},
		{fmt.Errorf("%w (last answer: %v)", context.DeadlineExceeded, status.Error(codes.Unavailable, "connection reset")),
			"no answer within --timeout 10s: context deadline exceeded (last answer: connection reset)", "longer --timeout"},
		{fmt.Errorf("%w (last answer: %v)", context.DeadlineExceeded, status.Error(codes.Unavailable, "tls: the peer's certificate \"x\" is not signed by the CA in ca.crt")),
			"is not signed by the CA in ca.crt", "another cluster"},
		{status.Error(codes.InvalidArgument, "region: key is empty"), "region: key is empty", "nothing was written"},
		{status.Error(codes.Unimplemented, "unknown service bellows.kv.v1.KV"), "unknown service", "is it a bellows store"},
	} {
		got := explain(tc.err, 10*time.Second).Error()
		if strings.Contains(got, "rpc error") || !strings.Contains(got, tc.what) || !strings.Contains(got, "hint: ") || !strings.Contains(got, tc.hint) {
			t.Errorf("explain(%v) = %q, want %q and a hint with %q, no gRPC text", tc.err, got, tc.what, tc.hint)
		}
	}
}

// `kv regions` shows each region's owner, size and load, in every format.
func TestKVRegionsShowsSizesLoadAndOwners(t *testing.T) {
	addr := startStore(t)
	host, _ := os.Hostname()
	kv(t, addr, "put", "k1", strings.Repeat("v", 2000))
	kv(t, addr, "flush", "region-001")

	var docs []regionDoc
	for _, line := range strings.Split(strings.TrimSpace(kv(t, addr, "regions", "-o", "json")), "\n") {
		var d regionDoc
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("regions -o json line %q: %v", line, err)
		}
		docs = append(docs, d)
	}
	if len(docs) != 4 {
		t.Fatalf("regions -o json: %d records, want 4: %+v", len(docs), docs)
	}
	for _, d := range docs {
		if d.Owner != host || d.Address != addr || d.Compaction != "idle" {
			t.Errorf("%s: owner %q at %q, compaction %q; want %s at %s, idle", d.Name, d.Owner, d.Address, d.Compaction, host, addr)
		}
	}
	if k := docs[1]; k.Name != "region-001" || k.DataBytes <= 0 || k.SSTFiles != 1 || k.MemstoreBytes != 0 || k.Requests < 1 {
		t.Errorf("region-001 after a put of 2000 bytes and a flush: %+v", k)
	}

	table := kv(t, addr, "regions", "-o", "table")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 5 || !regexp.MustCompile(`^REGION\s+START\s+END\s+OWNER\s+SIZE\s+MEMSTORE\s+WAL\s+UNFLUSHED\s+LOAD\s+REQUESTS\s+SSTS\s+COMPACTION\s+WARMUP$`).MatchString(lines[0]) {
		t.Fatalf("regions -o table:\n%s", table)
	}
	if !regexp.MustCompile(`^region-001\s+@\s+\\x80\s+` + regexp.QuoteMeta(host+" ("+addr+")") + `\s+\d+ B\s+0 B\s+0 B\s+-\s+\d+\.\d/s\s+1\s+1\s+idle\s+\d+%$`).MatchString(lines[2]) {
		t.Errorf("region-001's row: %q", lines[2])
	}
	text := kv(t, addr, "regions")
	if !strings.HasPrefix(text, "REGION\tRANGE\tOWNER\tSIZE\tMEMSTORE\tWAL\tUNFLUSHED\tLOAD\tREQUESTS\tSSTS\tCOMPACTION\tWARMUP\n"+
		"region-000\t[\"\", \"@\")\t"+host+" ("+addr+")\t0 B\t") {
		t.Errorf("regions (text):\n%s", text)
	}
}

// A backup command's --bucket (and restore's --from) must exist: a mistyped
// directory is named, not read as an empty bucket; restore's --to may be new.
func TestBackupBucketFlagsRefuseAMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such")
	if _, err := openBucketFlag(context.Background(), "bucket", missing, true); err == nil ||
		!strings.Contains(err.Error(), "--bucket "+missing+": no such directory") {
		t.Fatalf("a missing --bucket directory: %v", err)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("the refused directory was created")
	}
	b, err := openBucketFlag(context.Background(), "to", missing, false)
	if err != nil {
		t.Fatalf("a new --to directory: %v", err)
	}
	_ = b.Close()
}
