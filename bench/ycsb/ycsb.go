// Package ycsb runs the standard YCSB core workloads against Bellows: a
// Bellows binding of go-ycsb's DB interface over the Go client, driven by
// go-ycsb's own core workload, generators, client and measurement, so the
// workload files (workloads/workload[a-f]) and their usual properties
// (recordcount, operationcount, threadcount, requestdistribution, ...) run
// unchanged.
//
// A record is one key, "<table>:<key>", whose value is the record's fields
// encoded with go-ycsb's row codec (as its TiKV raw binding does). An update
// of some fields reads the record and writes it back whole: two concurrent
// updates of one record can lose one's fields, as in go-ycsb's raw bindings;
// YCSB measures latency and throughput, not that.
package ycsb

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/magiconair/properties"
	ycsbclient "github.com/pingcap/go-ycsb/pkg/client"
	"github.com/pingcap/go-ycsb/pkg/measurement"
	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/util"
	_ "github.com/pingcap/go-ycsb/pkg/workload" // registers the "core" workload
	"github.com/pingcap/go-ycsb/pkg/ycsb"

	"github.com/bellows-kv/bellows/client"
)

//go:embed workloads/workload?
var workloadFiles embed.FS

// Workloads are the names of the embedded core workloads, in order.
var Workloads = []string{"a", "b", "c", "d", "e", "f"}

// Properties are workload name's properties (workloads/workload<name>)
// with overrides applied on top.
func Properties(name string, overrides map[string]string) (*properties.Properties, error) {
	b, err := workloadFiles.ReadFile("workloads/workload" + name)
	if err != nil {
		return nil, fmt.Errorf("workload %q: want one of %s", name, strings.Join(Workloads, ", "))
	}
	p, err := properties.Load(b, properties.UTF8)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", name, err)
	}
	for k, v := range overrides {
		if _, _, err := p.Set(k, v); err != nil {
			return nil, fmt.Errorf("property %s=%s: %w", k, v, err)
		}
	}
	return p, nil
}

// db is the Bellows binding of ycsb.DB.
type db struct {
	c    *client.Client
	rows *util.RowCodec
}

// NewDB is a ycsb.DB over c for the workload's properties p (the fields).
func NewDB(c *client.Client, p *properties.Properties) ycsb.DB {
	return &db{c: c, rows: util.NewRowCodec(p)}
}

func rowKey(table, key string) []byte { return []byte(table + ":" + key) }

func (d *db) Close() error { return nil }

func (d *db) InitThread(ctx context.Context, _, _ int) context.Context { return ctx }

func (d *db) CleanupThread(context.Context) {}

func (d *db) Read(ctx context.Context, table, key string, fields []string) (map[string][]byte, error) {
	v, found, err := d.c.Get(ctx, rowKey(table, key))
	if err != nil || !found {
		return nil, err
	}
	return d.rows.Decode(v, fields)
}

func (d *db) Scan(ctx context.Context, table, startKey string, count int, fields []string) ([]map[string][]byte, error) {
	// The table's keys end before "<table>;" (';' follows ':').
	kvs, err := d.c.ScanAll(ctx, rowKey(table, startKey), []byte(table+";"), client.ScanOptions{Limit: count})
	if err != nil {
		return nil, err
	}
	out := make([]map[string][]byte, len(kvs))
	for i, kv := range kvs {
		if out[i], err = d.rows.Decode(kv.Value, fields); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *db) Update(ctx context.Context, table, key string, values map[string][]byte) error {
	v, found, err := d.c.Get(ctx, rowKey(table, key))
	if err != nil {
		return err
	}
	row := map[string][]byte{}
	if found {
		if row, err = d.rows.Decode(v, nil); err != nil {
			return err
		}
	}
	for f, val := range values {
		row[f] = val
	}
	return d.Insert(ctx, table, key, row)
}

func (d *db) Insert(ctx context.Context, table, key string, values map[string][]byte) error {
	v, err := d.rows.Encode(nil, values)
	if err != nil {
		return err
	}
	_, err = d.c.Put(ctx, rowKey(table, key), v)
	return err
}

func (d *db) Delete(ctx context.Context, table, key string) error {
	_, err := d.c.Delete(ctx, rowKey(table, key))
	return err
}

// OpStats is one operation's measurement, from go-ycsb's histogram.
type OpStats struct {
	Op    string  `json:"op"`
	Count int64   `json:"count"`
	OPS   float64 `json:"ops"`
	AvgUs int64   `json:"avgUs"`
	P50Us int64   `json:"p50Us"`
	P99Us int64   `json:"p99Us"`
	MaxUs int64   `json:"maxUs,omitempty"`
}

// Phase is the measurement of one phase (load or run) of a workload.
type Phase struct {
	Workload string        `json:"workload"`
	Phase    string        `json:"phase"`
	Took     time.Duration `json:"tookNs"`
	Ops      []OpStats     `json:"ops"`
}

// Errors is how many operations failed (go-ycsb's <OP>_ERROR series).
func (p Phase) Errors() int64 {
	var n int64
	for _, o := range p.Ops {
		if strings.HasSuffix(o.Op, "_ERROR") {
			n += o.Count
		}
	}
	return n
}

// Operations is how many workload operations succeeded. go-ycsb measures
// a read-modify-write (workload F) as READ_MODIFY_WRITE and also its READ and
// UPDATE; it is counted once here. TOTAL and failures are not counted.
func (p Phase) Operations() int64 {
	var n int64
	for _, o := range p.Ops {
		switch {
		case o.Op == "TOTAL" || strings.HasSuffix(o.Op, "_ERROR"):
		case o.Op == "READ_MODIFY_WRITE":
			n -= o.Count // its READ and UPDATE were counted
		default:
			n += o.Count
		}
	}
	return n
}

// Complete reports an error unless every operation the phase was to run
// (overrides' recordcount for a load, operationcount for a run) succeeded
// and was counted once.
func (p Phase) Complete(overrides map[string]string) error {
	key := prop.OperationCount
	if p.Phase == "load" {
		key = prop.RecordCount
	}
	want, err := strconv.ParseInt(overrides[key], 10, 64)
	if err != nil {
		return fmt.Errorf("workload %s %s: %s %q: %w", p.Workload, p.Phase, key, overrides[key], err)
	}
	if p.Errors() != 0 || p.Operations() != want {
		return fmt.Errorf("workload %s %s: %d operations counted, %d errors; want %d and none: %+v", p.Workload, p.Phase, p.Operations(), p.Errors(), want, p.Ops)
	}
	return nil
}

// Throughput is operations per second over the phase.
func (p Phase) Throughput() float64 { return float64(p.Operations()) / p.Took.Seconds() }

// RunPhase runs one phase of workload name against c — the load
// (dotransactions=false: recordcount inserts) or the run (operationcount
// operations) — with go-ycsb's client and measures it. go-ycsb's
// measurement is process-global: phases must not run concurrently.
func RunPhase(ctx context.Context, c *client.Client, name string, load bool, overrides map[string]string, workDir string) (Phase, error) {
	p, err := Properties(name, overrides)
	if err != nil {
		return Phase{}, err
	}
	phase := "run"
	count := p.GetInt64(prop.OperationCount, 0)
	if load {
		phase = "load"
		count = p.GetInt64(prop.RecordCount, 0)
	}
	// go-ycsb exits the process when a thread would get no operation.
	if threads := p.GetInt64(prop.ThreadCount, 1); threads < 1 || count < threads {
		return Phase{}, fmt.Errorf("workload %s %s: %d operations for %d threads: want at least one per thread", name, phase, count, threads)
	}
	out := filepath.Join(workDir, fmt.Sprintf("ycsb-%s-%s.json", name, phase))
	for k, v := range map[string]string{
		prop.DoTransactions:           strconv.FormatBool(!load),
		prop.MeasurementType:          "histogram",
		prop.OutputStyle:              util.OutputStyleJson,
		prop.MeasurementRawOutputFile: out,
		prop.LogInterval:              "3600", // no periodic summaries on stdout
	} {
		if _, _, err := p.Set(k, v); err != nil {
			return Phase{}, err
		}
	}
	creator := ycsb.GetWorkloadCreator(p.GetString(prop.Workload, "core"))
	if creator == nil {
		return Phase{}, fmt.Errorf("workload %s: go-ycsb has no workload %q", name, p.GetString(prop.Workload, ""))
	}
	w, err := creator.Create(p)
	if err != nil {
		return Phase{}, fmt.Errorf("workload %s: %w", name, err)
	}
	defer w.Close()
	measurement.InitMeasure(p)
	began := time.Now()
	// DbWrapper measures each operation, as go-ycsb's own command does.
	ycsbclient.NewClient(p, w, ycsbclient.DbWrapper{DB: NewDB(c, p)}).Run(ctx)
	took := time.Since(began)
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	measurement.Output()
	ops, err := readOutput(out)
	if err != nil {
		return Phase{}, fmt.Errorf("workload %s %s: %w", name, phase, err)
	}
	return Phase{Workload: name, Phase: phase, Took: took, Ops: ops}, nil
}

// readOutput parses go-ycsb's JSON output: one object per operation, keyed
// by its table header.
func readOutput(path string) ([]OpStats, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rows []map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(b), &rows); err != nil {
		return nil, fmt.Errorf("go-ycsb output %s: %w", path, err)
	}
	var out []OpStats
	for _, r := range rows {
		var s OpStats
		var errs []error
		num := func(k string) int64 {
			v, err := strconv.ParseInt(r[k], 10, 64)
			errs = append(errs, err)
			return v
		}
		s.Op = r["Operation"]
		s.Count, s.AvgUs, s.P50Us, s.P99Us, s.MaxUs = num("Count"), num("Avg(us)"), num("50th(us)"), num("99th(us)"), num("Max(us)")
		var err error
		s.OPS, err = strconv.ParseFloat(r["OPS"], 64)
		if err := errors.Join(append(errs, err)...); err != nil {
			return nil, fmt.Errorf("go-ycsb output %s, %s: %w", path, s.Op, err)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b OpStats) int { return strings.Compare(a.Op, b.Op) })
	return out, nil
}
