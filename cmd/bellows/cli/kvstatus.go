package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// storeStatus is one store's answer to `bellows kv status`.
type storeStatus struct {
	Address string   `json:"address"`
	Healthy bool     `json:"healthy"`
	Error   string   `json:"error,omitempty"`
	Regions []string `json:"regions"`
	TookMS  int64    `json:"took_ms"`
	// FailingOver are the regions the store says are failing over: its
	// own, when its liveness lease ran out or it is taking one over from a
	// dead store, and others' whose owner by its region map is dead.
	FailingOver []failingOver `json:"failing_over,omitempty"`
	peers       []string
	ordinal     string // "" when the store has none
}

// failingOver is a region failing over, and the store whose liveness lease
// ran out (its ordinal).
type failingOver struct {
	Region string `json:"region"`
	From   string `json:"from"`
}

// failingOverText is what a store says is failing over, grouped by the
// store each fails over from, e.g. "region-001, region-004 (store 1's
// liveness lease ran out)"; "" for nothing.
func (s storeStatus) failingOverText() string {
	var froms []string
	by := map[string][]string{}
	for _, f := range s.FailingOver {
		if _, ok := by[f.From]; !ok {
			froms = append(froms, f.From)
		}
		by[f.From] = append(by[f.From], f.Region)
	}
	var parts []string
	for _, from := range froms {
		why := fmt.Sprintf("store %s's liveness lease ran out", from)
		if from == s.ordinal {
			why = "this store's liveness lease ran out"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", strings.Join(by[from], ", "), why))
	}
	return strings.Join(parts, "; ")
}

func newKVStatusCommand(f *kvFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "status",
		Aliases: []string{"health"},
		Short:   "Ask every store reachable from --addr (and the peers they list) for its regions and those failing over; exit status 1 unless every one answers",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.printer(cmd, "ADDRESS", "HEALTHY", "REGIONS", "TOOK", "FAILING OVER", "ERROR")
			if err != nil {
				return err
			}
			if err := useContext(cmd, &f.addr); err != nil {
				return err
			}
			seeds, err := parseSeeds(f.addr)
			if err != nil {
				return err
			}
			ctx, cancel, err := commandContext(cmd.Context(), f.timeout)
			if err != nil {
				return err
			}
			defer cancel()
			all := askStores(ctx, seeds)
			var peers []string
			for _, s := range all {
				peers = append(peers, s.peers...)
			}
			slices.Sort(peers)
			for _, s := range askStores(ctx, slices.Compact(peers)) {
				if !slices.ContainsFunc(all, func(o storeStatus) bool { return o.Address == s.Address }) {
					all = append(all, s)
				}
			}
			served := map[string]bool{}
			var known []string // every region any store listed
			unhealthy, failing := 0, 0
			for _, s := range all {
				if !s.Healthy {
					unhealthy++
				}
				failing += len(s.FailingOver)
				for _, r := range s.Regions {
					if !served[r] {
						known = append(known, r)
					}
					served[r] = true
				}
				fo := s.failingOverText()
				text := fmt.Sprintf("%s\thealthy\t%d regions: %s\t%dms", s.Address, len(s.Regions), strings.Join(s.Regions, ","), s.TookMS)
				if fo != "" {
					text += "\tfailing over: " + fo
				}
				text += "\n"
				if !s.Healthy {
					text = fmt.Sprintf("%s\tunhealthy\t%s\n", s.Address, s.Error)
				}
				_ = p.record(text, s, s.Address, fmt.Sprint(s.Healthy), strings.Join(s.Regions, ","), fmt.Sprintf("%dms", s.TookMS), fo, s.Error)
			}
			if err := p.flush(); err != nil {
				return err
			}
			switch {
			case unhealthy > 0:
				hint := fmt.Sprintf("check the address (a store's gRPC port is %d by default) and that the store runs; its log says why it stopped", contract.StoreGRPCPort)
				if failing > 0 {
					hint = "a store is gone and its regions are failing over to the live stores, which serve them within seconds (docs/failover.md); " + hint
				}
				return &userError{what: fmt.Sprintf("%d of %d stores did not answer", unhealthy, len(all)), hint: hint}
			case len(known) == 0:
				return &userError{what: "no store serves any region yet", hint: "a store lists its regions once it has opened them; retry in a moment"}
			}
			return nil
		},
	}
}

// askStores asks each address for its regions, concurrently.
func askStores(ctx context.Context, addrs []string) []storeStatus {
	out := make([]storeStatus, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() { out[i] = askStore(ctx, a) })
	}
	wg.Wait()
	return out
}

func askStore(ctx context.Context, addr string) storeStatus {
	s := storeStatus{Address: addr, Regions: []string{}}
	began := time.Now()
	defer func() { s.TookMS = time.Since(began).Milliseconds() }()
	if err := reachAny(ctx, []string{addr}); err != nil {
		s.Error = strings.TrimPrefix(err.(*userError).what, "cannot connect to "+addr+": ")
		return s
	}
	dial, err := clientDial(addr)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		s.Error = err.Error()
		return s
	}
	defer conn.Close()
	resp, err := kvpb.NewKVClient(conn).Regions(ctx, &kvpb.RegionsRequest{})
	if err != nil {
		s.Error = explain(err, 0).(*userError).what
		return s
	}
	s.Healthy = true
	for _, r := range resp.Regions {
		s.Regions = append(s.Regions, r.Name)
		if r.FailingOverFrom != "" {
			s.FailingOver = append(s.FailingOver, failingOver{Region: r.Name, From: r.FailingOverFrom})
		}
	}
	for _, r := range resp.FailingOver {
		s.FailingOver = append(s.FailingOver, failingOver{Region: r.Name, From: r.Store})
	}
	s.peers = resp.Peers
	if resp.Ordinal != nil {
		s.ordinal = strconv.Itoa(int(*resp.Ordinal))
	}
	return s
}

func newKVRegionsCommand(f *kvFlags) *cobra.Command {
	return &cobra.Command{Use: "regions", Short: "List the cluster's regions: key ranges, owners, sizes, load, WAL, compaction and warmup state, from every store reachable from --addr",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.printer(cmd, regionHeader...)
			if err != nil {
				return err
			}
			return f.with(cmd, func(ctx context.Context, c *client.Client) error {
				// Readings, unlike the routes, are worth having fresh.
				if err := c.Refresh(ctx); err != nil {
					return err
				}
				return printRegions(p, c.Regions())
			})
		}}
}
