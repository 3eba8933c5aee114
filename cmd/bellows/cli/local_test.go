package cli

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// bellowsBinary builds cmd/bellows once: bellows local re-executes its own
// binary for the store and compactors, which in a test would be the test.
var bellowsBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "bellows-cli-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bellows")
	cmd := exec.Command("go", "build", "-o", bin, "../../../cmd/bellows")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go build ./cmd/bellows: " + err.Error() + "\n" + string(out))
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := bellowsBinary(); err == nil {
		_ = os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := bellowsBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runBellows runs the binary to its end in dir.
func runBellows(t *testing.T, dir string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit) && ctx.Err() == nil:
		return string(out), exit.ExitCode()
	}
	t.Fatalf("bellows %s: %v\n%s", strings.Join(args, " "), err, out)
	return "", 0
}

// local is a running `bellows local`.
type local struct {
	cmd    *exec.Cmd
	addr   string
	out    string
	exited chan struct{}
}

// startLocal starts bellows local in dir (no compactors: quicker) and
// waits for its ready line.
func startLocal(t *testing.T, dir string, args ...string) *local {
	t.Helper()
	args = append([]string{"local", "--listen=127.0.0.1:0", "--compactors=0"}, args...)
	l := &local{cmd: exec.Command(binary(t), args...), exited: make(chan struct{})}
	l.cmd.Dir = dir
	l.cmd.Stderr = os.Stderr
	stdout, err := l.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = l.cmd.Wait(); close(l.exited) }()
	t.Cleanup(func() { l.stop(t) })
	storeLine := regexp.MustCompile(`^store\s+grpc=(\S+)\s`)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		l.out += sc.Text() + "\n"
		if m := storeLine.FindStringSubmatch(sc.Text()); m != nil {
			l.addr = m[1]
		}
		if strings.HasPrefix(sc.Text(), "ready;") {
			return l
		}
	}
	t.Fatalf("bellows local exited before it was ready:\n%s", l.out)
	return nil
}

// stop is Ctrl-C.
func (l *local) stop(t *testing.T) {
	select {
	case <-l.exited:
		return
	default:
	}
	_ = l.cmd.Process.Signal(os.Interrupt)
	select {
	case <-l.exited:
	case <-time.After(time.Minute):
		_ = l.cmd.Process.Kill()
		t.Errorf("bellows local did not stop within a minute of SIGINT")
	}
}

func TestLocalRefusesBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--compactors -1":                   "--compactors -1: must be 0 or more",
		"--regions 0":                       "--regions 0: must be 1 or more",
		"--offload Sometimes":               `--offload "Sometimes": want one of [Required Preferred Disabled]`,
		"--compactors 0 --offload Required": "--offload Required needs compactors",
		"--memstore-policy Lazy":            `--memstore-policy "Lazy": want one of`,
		"--cache-bytes lots":                `--cache-bytes "lots"`,
	} {
		root := NewRootCommand()
		root.SetArgs(append([]string{"local", "--data-dir", t.TempDir()}, strings.Fields(args)...))
		root.SetOut(&strings.Builder{})
		root.SetErr(&strings.Builder{})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("local %s: %v, want an error saying %q", args, err, want)
		}
	}
}

func TestLocalSaysWhyTheStoreExited(t *testing.T) {
	// An address of no interface here (TEST-NET-1): the store cannot bind.
	const nowhere = "192.0.2.1:7400"
	out, code := runBellows(t, t.TempDir(), nil, "local", "--compactors=0", "--listen="+nowhere)
	if code == 0 || !strings.Contains(out, "store exited: exit status 1; its log") ||
		!strings.Contains(out, "--listen "+nowhere+": listen tcp "+nowhere+": bind: cannot assign requested address") {
		t.Fatalf("bellows local on an address it cannot bind: exit %d, want the store's error in the output:\n%s", code, out)
	}
}

// A second bellows local on a busy port (the guide's restore step, with the
// first cluster running) is told so before anything starts, with the port
// and a free one to give --listen.
func TestLocalOnABusyPortSaysWhatToDo(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	// A restored cluster's bucket, as bellows restore --to restored/bucket
	// leaves it (its marker is what bellows local looks for).
	if err := os.MkdirAll(filepath.Join(dir, "restored", "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "restored", "bucket", contract.BucketMarker), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runBellows(t, dir, nil, "local", "--compactors=0", "--data-dir", "restored", "--listen="+busy.Addr().String())
	if code == 0 || !strings.Contains(out, "--listen "+busy.Addr().String()+": the address is in use") ||
		!regexp.MustCompile(`run this one beside it with --listen 127\.0\.0\.1:\d+ \(free now\) and give bellows kv and backup create --addr 127\.0\.0\.1:\d+`).MatchString(out) {
		t.Fatalf("bellows local on a busy port: exit %d, want the port named and --listen suggested:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "restored", "logs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused bellows local started something (it made logs/): %v", err)
	}
}

func TestSecondLocalOnTheSameDataDirIsRefusedAndLeavesTheLogs(t *testing.T) {
	dir := t.TempDir()
	first := startLocal(t, dir) // the default data directory: a cluster without asking
	if !strings.Contains(first.out, "new cluster in "+filepath.Join(dir, defaultLocalDataDir)) {
		t.Fatalf("the first run in a new default data directory:\n%s", first.out)
	}
	if _, err := os.Stat(filepath.Join(dir, defaultLocalDataDir, "bucket", contract.BucketMarker)); err != nil {
		t.Fatalf("no marker in the new cluster's bucket: %v", err)
	}
	log := filepath.Join(dir, defaultLocalDataDir, "logs", "store.log")
	before, err := os.ReadFile(log)
	if err != nil || len(before) == 0 {
		t.Fatalf("store.log: %q, %v", before, err)
	}
	out, code := runBellows(t, dir, nil, "local", "--compactors=0", "--listen=127.0.0.1:0")
	if code == 0 || !regexp.MustCompile(`--data-dir \S+ is in use by another bellows local \(pid \d+\)`).MatchString(out) {
		t.Fatalf("a second bellows local on the same data directory: exit %d:\n%s", code, out)
	}
	after, err := os.ReadFile(log)
	if err != nil || !strings.HasPrefix(string(after), string(before)) {
		t.Fatalf("the second run changed the running store's log:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := kv(t, first.addr, "put", "still", "serving"); !strings.HasPrefix(got, "OK ") {
		t.Fatalf("the first bellows local after the second was refused: %q", got)
	}
}

func TestLocalNeedsCreateBucketForAnotherDataDirAndKeepsEarlierLogs(t *testing.T) {
	dir := t.TempDir()
	out, code := runBellows(t, dir, nil, "local", "--compactors=0", "--listen=127.0.0.1:0", "--data-dir", "mistyped")
	if code == 0 || !strings.Contains(out, "--data-dir mistyped holds no bellows local cluster") || !strings.Contains(out, "--create-bucket") {
		t.Fatalf("bellows local --data-dir mistyped: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "mistyped", "bucket")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused run made a bucket: %v", err)
	}
	l := startLocal(t, dir, "--data-dir", "other", "--create-bucket")
	kv(t, l.addr, "put", "k", "v")
	// A crash: the store and bellows local die without a word.
	_ = l.cmd.Process.Signal(syscall.SIGKILL)
	<-l.exited
	log := filepath.Join(dir, "other", "logs", "store.log")
	// The store outlives it for its shutdown (its parent's death sends
	// it SIGTERM) and holds the data directory's lock until it is gone.
	waitForLock(t, filepath.Join(dir, "other", localLockFile))
	again := startLocal(t, dir, "--data-dir", "other") // no --create-bucket: the cluster is there
	if got := kv(t, again.addr, "get", "k"); got != "v" {
		t.Fatalf("get k after the restart = %q", got)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "---- store started "); n != 2 {
		t.Fatalf("store.log holds %d runs, want both the crashed one and this one:\n%s", n, data)
	}
}

func TestStoreRefusesAFileBucketWithoutACluster(t *testing.T) {
	dir := t.TempDir()
	run := func(bucket string, extra ...string) error {
		root := NewRootCommand()
		root.SetArgs(append([]string{"store", "--bucket=file://" + bucket, "--wal-dir=" + filepath.Join(dir, "wal"),
			"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--offload=Disabled"}, extra...))
		root.SetOut(&strings.Builder{})
		root.SetErr(&strings.Builder{})
		return root.Execute()
	}
	missing := filepath.Join(dir, "typo")
	if err := run(missing); err == nil || !strings.Contains(err.Error(), "holds no Bellows cluster (the directory "+missing+" does not exist") ||
		!strings.Contains(err.Error(), "--create-bucket") {
		t.Fatalf("a bucket directory that does not exist: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused store created %s: %v", missing, err)
	}
	empty := t.TempDir()
	if err := run(empty); err == nil || !strings.Contains(err.Error(), "has no "+contract.BucketMarker+" and no regions/") {
		t.Fatalf("an empty bucket directory: %v", err)
	}
}

func TestMissingS3CredentialsAreOneLineWithAHint(t *testing.T) {
	home := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none")}
	out, code := runBellows(t, home, env, "store", "--bucket=s3://bucket?endpoint=http://127.0.0.1:1&region=us-east-1",
		"--wal-dir="+filepath.Join(home, "wal"), "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--offload=Disabled")
	var errLines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "time=") { // the store's own log lines
			errLines = append(errLines, l)
		}
	}
	if code == 0 || len(errLines) != 1 || !strings.Contains(errLines[0], "no usable credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("a store without S3 credentials: exit %d, want one error line with a hint:\n%s", code, out)
	}
}

// waitForLock returns once no process holds the flock on path.
func waitForLock(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// The ready line's command names the binary as it was run (make run runs
// $PWD/bin/bellows: bin/bellows), and Ctrl-C ends with a line that says
// bellows local stopped, once its processes have.
func TestLocalNamesItsBinaryAndSaysWhenItStopped(t *testing.T) {
	bin := binary(t)
	data := t.TempDir()
	cmd := exec.Command(bin, "local", "--listen=127.0.0.1:0", "--compactors=0", "--tls=false", "--data-dir", data, "--create-bucket")
	cmd.Dir = filepath.Dir(filepath.Dir(bin)) // bin is DIR/bellows-cli-testN/bellows
	want := "try: " + filepath.Join(filepath.Base(filepath.Dir(bin)), "bellows") + " kv put hello world --addr "
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	sc := bufio.NewScanner(stdout)
	var out []string
	for sc.Scan() {
		out = append(out, sc.Text())
		if strings.HasPrefix(sc.Text(), "ready;") {
			if !strings.Contains(sc.Text(), want) {
				t.Errorf("the ready line %q does not say %q", sc.Text(), want)
			}
			_ = cmd.Process.Signal(os.Interrupt)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("bellows local after Ctrl-C: %v", err)
	}
	if len(out) == 0 || out[len(out)-1] != "bellows local: stopped" {
		t.Errorf("bellows local's output does not end with %q:\n%s", "bellows local: stopped", strings.Join(out, "\n"))
	}
}

func TestInvokedAsIsRelativeToTheWorkingDirectory(t *testing.T) {
	defer func(a string) { os.Args[0] = a }(os.Args[0])
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		filepath.Join(wd, "bin", "bellows"): filepath.Join("bin", "bellows"),
		filepath.Join(wd, "bellows"):        "./bellows",
		"bin/bellows":                       "bin/bellows",
		"/elsewhere/bellows":                "/elsewhere/bellows",
	} {
		os.Args[0] = arg
		if got := invokedAs(); got != want {
			t.Errorf("os.Args[0] %s: %q, want %q", arg, got, want)
		}
	}
}
