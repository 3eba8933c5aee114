package server

import (
	"context"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/txn"
)

// txnStore is the store as storage-engine/txn reaches it. It is KV's, not
// Store's: routing a key to a peer is forwarding, which KV does.
type txnStore struct{ kv *KV }

var _ txn.Store = txnStore{}

// Route is resolve, so a key is routed for a transaction as for any
// request: the txn package's own calls carry no forwarded header, and may
// go to a peer.
func (s txnStore) Route(ctx context.Context, key []byte) (txn.Region, error) {
	t, err := s.kv.resolve(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.kv.txnRegion(t), nil
}

func (s txnStore) Local() []txn.Region {
	var out []txn.Region
	for _, a := range s.kv.store.Assignments() {
		t := target{local: a}
		t.eng, t.notOpen = a.Engine()
		out = append(out, s.kv.txnRegion(t))
	}
	return out
}

func (s txnStore) Now() time.Time { return time.Now() }

func (s txnStore) Clock() *hlc.Clock { return s.kv.store.Clock() }

// txnRegion is t as storage-engine/txn reaches it.
func (s *KV) txnRegion(t target) txn.Region { return txnRegion{kv: s, t: t} }

type txnRegion struct {
	kv *KV
	t  target
}

func (r txnRegion) Name() string {
	if r.t.forward {
		return r.t.remote.Name
	}
	return r.t.local.Name()
}

func (r txnRegion) Engine() (*region.Region, error) { return r.t.engine() }

func (r txnRegion) Status(err error) error { return regionErr(r.t.local, err) }

func (r txnRegion) Bounds() (start, end []byte) {
	if r.t.forward {
		return r.t.remote.Start, r.t.remote.End
	}
	return r.t.local.Span.Start, r.t.local.Span.End
}

func (r txnRegion) Peer() txn.Peer {
	if !r.t.forward {
		return nil
	}
	return txnPeer(r)
}

// txnPeer forwards a region's participant calls to its owners.
type txnPeer txnRegion

func (p txnPeer) Prewrite(ctx context.Context, req *kvpb.PrewriteRequest) (resp *kvpb.PrewriteResponse, err error) {
	err = p.kv.forward(ctx, "prewrite", p.t, func(ctx context.Context, c kvpb.KVClient) (err error) {
		resp, err = c.Prewrite(ctx, req)
		return err
	})
	return resp, err
}

func (p txnPeer) ResolveLocks(ctx context.Context, req *kvpb.ResolveLocksRequest) error {
	return p.kv.forward(ctx, "resolve-locks", p.t, func(ctx context.Context, c kvpb.KVClient) error {
		_, err := c.ResolveLocks(ctx, req)
		return err
	})
}

func (p txnPeer) CheckTxnStatus(ctx context.Context, req *kvpb.CheckTxnStatusRequest) (resp *kvpb.CheckTxnStatusResponse, err error) {
	err = p.kv.forward(ctx, "check-txn-status", p.t, func(ctx context.Context, c kvpb.KVClient) (err error) {
		resp, err = c.CheckTxnStatus(ctx, req)
		return err
	})
	return resp, err
}

func (p txnPeer) ValidateReads(ctx context.Context, req *kvpb.ValidateReadsRequest) error {
	return p.kv.forward(ctx, "validate-reads", p.t, func(ctx context.Context, c kvpb.KVClient) error {
		_, err := c.ValidateReads(ctx, req)
		return err
	})
}
