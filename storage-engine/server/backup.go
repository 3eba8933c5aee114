package server

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/backup"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// CheckpointStats count the backups' region checkpoints a store ran
// (bellows_backup_* metrics).
type CheckpointStats struct {
	Succeeded, Failed atomic.Uint64
	// CopiedBytes: what the checkpoints copied or cut into backups/sst/
	// (a file an earlier backup copied is not copied again).
	CopiedBytes atomic.Uint64
	// Nanos: time spent in checkpoints, resolution, flush and copies
	// included.
	Nanos atomic.Uint64
}

// Checkpoints are the store's checkpoint counts.
func (s *Store) Checkpoints() *CheckpointStats { return &s.checkpoints }

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
	began := time.Now()
	stats := s.store.Checkpoints()
	defer func() { stats.Nanos.Add(uint64(time.Since(began))) }()
	err = e.Checkpoint(ctx, req.Ts,
		func(op func() error) error { return s.withLocks(ctx, t, op) },
		func(m manifest.Manifest) (err error) {
			out, err = backup.CopyRegion(ctx, s.store.opts.Region.Bucket, a.Name(), m, req.Ts)
			return err
		})
	if err != nil {
		stats.Failed.Add(1)
		return nil, regionErr(a, err)
	}
	stats.Succeeded.Add(1)
	stats.CopiedBytes.Add(uint64(out.CopiedBytes))
	data, err := json.Marshal(out)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &kvpb.CheckpointResponse{RegionJson: data}, nil
}
