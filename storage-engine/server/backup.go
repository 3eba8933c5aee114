package server

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// Checkpoint implements kvpb.AdminServer: region.Checkpoint at req.Ts,
// resolving the locks it meets as a transactional read does, then
// backup.CopyRegion of the checkpointed files inside the store's bucket.
func (s *KV) Checkpoint(ctx context.Context, req *kvpb.CheckpointRequest) (*kvpb.CheckpointResponse, error) {
	if req.Ts == 0 {
		return nil, status.Error(codes.InvalidArgument, "ts is 0: take the backup's timestamp from BeginTxn")
	}
	if err := s.observe(req.Ts); err != nil {
		return nil, err
	}
	a := s.store.ByName(req.Region)
	if a == nil {
		return nil, status.Errorf(codes.NotFound, "this store serves no region %q", req.Region)
	}
	e, err := a.Engine()
	if err != nil {
		return nil, regionErr(a, err)
	}
	t := target{local: a, eng: e}
	var out backup.Region
	err = e.Checkpoint(ctx, req.Ts,
		func(op func() error) error { return s.withLocks(ctx, t, op) },
		func(m manifest.Manifest) (err error) {
			out, err = backup.CopyRegion(ctx, s.store.opts.Region.Bucket, a.Name(), m, req.Ts)
			return err
		})
	if err != nil {
		return nil, regionErr(a, err)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &kvpb.CheckpointResponse{RegionJson: data}, nil
}
