package offload

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
)

// announceInterval is how often the announcer looks for workers it has not
// told about this session yet (discovery adds workers at any time).
const announceInterval = 5 * time.Second

// announceTimeout bounds one Announce: a worker that does not answer is
// asked again on the next round.
const announceTimeout = 2 * time.Second

// announceLoop tells every worker this store discovers which session is
// current, once per worker, so a worker frees what the store's previous
// incarnation kept there even if no job of this session ever reaches it
// (without it those outputs hold the worker's cache until their TTL).
func (e *Executor) announceLoop(ctx context.Context) {
	defer close(e.done)
	told := map[string]bool{}
	t := time.NewTicker(announceInterval)
	defer t.Stop()
	for {
		for _, addr := range e.opts.Workers.Compactors() {
			if !told[addr] {
				told[addr] = e.announce(ctx, addr)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// announce tells one worker; it reports whether that is done (a worker too
// old to know Announce counts as told: its outputs expire by their TTL).
func (e *Executor) announce(ctx context.Context, addr string) bool {
	c, err := e.conn(addr)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, announceTimeout)
	defer cancel()
	resp, err := compactionpb.NewCompactorClient(c).Announce(ctx, &compactionpb.AnnounceRequest{Store: e.opts.Store, Session: e.opts.Session})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return true
	case err != nil:
		e.opts.Logger.Debug("announcing this store's session to a worker failed; retrying", "worker", addr, "err", err)
		return false
	}
	if resp.FreedBytes > 0 {
		e.opts.Logger.Info("a worker released what this store's previous session kept", "worker", addr, "bytes", resp.FreedBytes)
	}
	return true
}
