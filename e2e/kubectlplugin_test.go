//go:build e2e

package e2e

import (
	"archive/zip"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
)

// pluginRegion is a record of `kubectl bellows regions -o json`.
type pluginRegion struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	DataBytes  int64  `json:"data_bytes"`
	Requests   uint64 `json:"requests"`
	SSTFiles   int    `json:"sst_files"`
	Compaction string `json:"compaction"`
}

// 5. The kubectl plugin, run by kubectl as a user runs it (kubectl-bellows
// on PATH): status shows the cluster Ready with its stores and pool;
// regions lists every region with the pod that owns it, its size and load;
// watch delivers the changes to a prefix, through a port-forward to each
// region's owner; flush and compact go to the owner and succeed; backup takes a backup
// through a store pod and backups lists it; report writes a zip with
// the resources, pods, events and logs; errors name what is missing. The
// stores are reached only through the API server (port-forwards).
func (e *env) kubectlPlugin(t *testing.T, kv *kvClient, l *ledger) {
	e.pluginOnPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	write(t, ctx, kv, l, "plugin", 200, 512)

	status := e.run(t, "kubectl", "bellows", "status", clusterName, "--namespace", ns)
	t.Logf("kubectl bellows status:\n%s", status)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`KVCluster:\s+demo \(namespace ` + ns + `\)`),
		regexp.MustCompile(`\nReady:\s+True\s`),
		regexp.MustCompile(`CompactionPool:\s+` + poolName),
		regexp.MustCompile(`\n` + clusterName + `-0\s+store\s+1/1\s+Running`),
		regexp.MustCompile(`\n` + poolName + `-\S+\s+worker\s+1/1\s+Running`),
	} {
		if !want.MatchString(status) {
			t.Errorf("kubectl bellows status lacks %s:\n%s", want, status)
		}
	}

	// A watch of a prefix from the start of the retained history, through
	// the plugin (each region's owner reached by its own port-forward):
	// every change to it, once, in commit order.
	var watched []string
	values := map[string]string{}
	for i := range 10 {
		key := fmt.Sprintf("plugin-watch/%02d", i)
		val := []byte("w" + strconv.Itoa(i))
		if _, err := kv.Put(ctx, []byte(key), val); err != nil {
			t.Fatalf("put %q: %v", key, err)
		}
		l.ack([]byte(key), val)
		watched, values[key] = append(watched, key), string(val)
	}
	out := e.run(t, "kubectl", "bellows", "watch", clusterName, "--prefix", "plugin-watch/", "--count", "10", "-o", "json", "--timeout", "2m", "--namespace", ns)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Type  string `json:"type"`
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != "put" || string(ev.Value) != values[string(ev.Key)] {
			t.Errorf("kubectl bellows watch: line %q (%v)", line, err)
		}
		got = append(got, string(ev.Key))
	}
	if !slices.Equal(got, watched) {
		t.Errorf("kubectl bellows watch --prefix plugin-watch/ delivered %q, want the puts in commit order %q", got, watched)
	}

	stores := map[string]bool{}
	for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
		stores[p.Name] = true
	}
	routes, err := kv.Regions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	regions := e.pluginRegions(t)
	var names []string
	var written int64
	for _, r := range regions {
		names = append(names, r.Name)
		written += r.DataBytes
		if !stores[r.Owner] {
			t.Errorf("region %s: owner %q is not a storage pod of %s (%v)", r.Name, r.Owner, clusterName, stores)
		}
	}
	var want []string
	for _, r := range routes {
		want = append(want, r.region)
	}
	slices.Sort(names)
	slices.Sort(want)
	names, want = slices.Compact(names), slices.Compact(want)
	if !slices.Equal(names, want) || written <= 0 {
		t.Errorf("regions %v with %d bytes, want the stores' regions %v and the data just written", names, written, want)
	}
	table := e.run(t, "kubectl", "bellows", "regions", clusterName, "--namespace", ns)
	t.Logf("kubectl bellows regions:\n%s", table)
	if !regexp.MustCompile(`^REGION\s+START\s+END\s+OWNER\s+SIZE\s+MEMSTORE\s+WAL\s+UNFLUSHED\s+LOAD`).MatchString(table) {
		t.Errorf("kubectl bellows regions:\n%s", table)
	}

	// One region, at its owner: the one holding the most of the keys just
	// written. A minor compaction of its one SST has nothing to do, or
	// merges what an earlier flush left.
	r0 := regions[0]
	for _, r := range regions {
		if r.DataBytes > r0.DataBytes {
			r0 = r
		}
	}
	out = e.run(t, "kubectl", "bellows", "flush", clusterName, r0.Name, "--namespace", ns)
	if out != "OK flushed "+r0.Name+" (at "+r0.Owner+")\n" {
		t.Errorf("flush %s: %q", r0.Name, out)
	}
	compacted := regexp.MustCompile(`^OK (\S+) \(at (\S+)\): (nothing to compact|\d+ files \(\d+ bytes\) -> \S+, ran (local|remote)\b.*)$`)
	out = e.run(t, "kubectl", "bellows", "compact", clusterName, r0.Name, "--namespace", ns)
	if m := compacted.FindStringSubmatch(strings.TrimSuffix(out, "\n")); m == nil || m[1] != r0.Name || m[2] != r0.Owner {
		t.Errorf("compact %s: %q", r0.Name, out)
	}

	// Every region: flushed, then compacted into one file each.
	out = e.run(t, "kubectl", "bellows", "flush", clusterName, "--namespace", ns)
	t.Logf("kubectl bellows flush:\n%s", out)
	if n := strings.Count(out, "OK flushed "); n != len(want) {
		t.Errorf("flush of every region flushed %d, want %d:\n%s", n, len(want), out)
	}
	// Every region's major compaction, one after another: the worker link
	// is as slow as the autoscaling scenarios left it (tens of KB/s), so
	// the command gets no deadline of its own.
	out = e.run(t, "kubectl", "bellows", "compact", clusterName, "--major", "--timeout=0", "--namespace", ns)
	t.Logf("kubectl bellows compact --major:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) || slices.ContainsFunc(lines, func(l string) bool { return !compacted.MatchString(l) }) {
		t.Errorf("compact --major of every region: want one OK per region %v:\n%s", want, out)
	}
	for _, r := range e.pluginRegions(t) {
		if r.SSTFiles > 1 || !strings.HasPrefix(r.Compaction, "idle") {
			t.Errorf("%s at %s after a major compaction: %d SSTs, compaction %s", r.Name, r.Owner, r.SSTFiles, r.Compaction)
		}
	}
	// A backup, taken by a store pod in the cluster's bucket (the S3
	// server: server-side copies), then listed; its ID cannot be reused.
	out = e.run(t, "kubectl", "bellows", "backup", clusterName, "before-upgrade", "--namespace", ns)
	t.Logf("kubectl bellows backup:\n%s", out)
	if !regexp.MustCompile(`^OK backup before-upgrade at ts \d+ \(\S+\): ` + strconv.Itoa(len(want)) + ` regions, [1-9]\d* files, .* taken by ` + clusterName + `-\d+\n$`).MatchString(out) {
		t.Errorf("kubectl bellows backup: %q, want a backup of every region %v", out, want)
	}
	out = e.run(t, "kubectl", "bellows", "backups", clusterName, "--namespace", ns)
	if !regexp.MustCompile(`(?m)^before-upgrade\s+\d+\s`).MatchString(out) {
		t.Errorf("kubectl bellows backups does not list before-upgrade:\n%s", out)
	}
	out, err = e.try("kubectl", "bellows", "backup", clusterName, "before-upgrade", "--namespace", ns)
	if err == nil || !strings.Contains(out, "a backup of that ID exists") {
		t.Errorf("a second backup named before-upgrade: %v\n%s", err, out)
	}
	out, err = e.try("kubectl", "bellows", "compact", clusterName, "region-999", "--namespace", ns)
	if err == nil || !strings.Contains(out, `KVCluster demo has no region "region-999"; its regions are `) ||
		slices.ContainsFunc(want, func(r string) bool { return !strings.Contains(out, r) }) {
		t.Errorf("compact of an unknown region: %v, want the regions %v listed\n%s", err, want, out)
	}
	out, err = e.try("kubectl", "bellows", "status", "nope", "--namespace", ns)
	if err == nil || !strings.Contains(out, `no KVCluster "nope" in namespace "`+ns+`" (there are: demo)`) {
		t.Errorf("status of an unknown cluster: %v\n%s", err, out)
	}

	// The file named in the call itself, so docs/cluster_test.go sees the
	// guide's name is the suite's.
	dir := t.TempDir() + string(filepath.Separator)
	e.run(t, "kubectl", "bellows", "report", clusterName, "--file", dir+"demo-report.zip", "--namespace", ns)
	file := dir + "demo-report.zip"
	z, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	entries := map[string]bool{}
	for _, f := range z.File {
		entries[f.Name] = true
	}
	wantEntries := []string{"README.txt", "kvcluster.yaml", "compactionpool.yaml", "pods.yaml", "events.yaml", "statefulsets.yaml",
		"deployments.yaml", "services.yaml", "configmaps.yaml", "operator/pods.yaml"}
	for p := range stores {
		wantEntries = append(wantEntries, "logs/"+p+"/store.log")
	}
	for _, w := range wantEntries {
		if !entries[w] {
			t.Errorf("the report lacks %s; it has %v", w, entries)
		}
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(entries)), func(n string) bool { return strings.HasPrefix(n, "operator/logs/") }) {
		t.Errorf("the report has no operator logs: %v", entries)
	}
	verifyLedger(t, ctx, kv, l)
}

// pluginRegions runs `kubectl bellows regions -o json`.
func (e *env) pluginRegions(t *testing.T) []pluginRegion {
	t.Helper()
	out := e.run(t, "kubectl", "bellows", "regions", clusterName, "--namespace", ns, "--output", "json")
	var rs []pluginRegion
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r pluginRegion
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kubectl bellows regions -o json: %q: %v\n%s", line, err, out)
		}
		rs = append(rs, r)
	}
	return rs
}

// pluginOnPath makes kubectl find the plugin: hack/e2e.sh puts bin/ (make
// kubectl-plugin) on PATH; run alone, the scenario builds it.
func (e *env) pluginOnPath(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kubectl-bellows"); err == nil {
		return
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-bellows"), "./cmd/bellows")
	build.Dir = e.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}
