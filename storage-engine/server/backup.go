package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
		return nil, status.Error(codes.InvalidArgument, "ts is 0: give the backup's timestamp, one clock reading for every region (Admin.Backup takes it from the driving store's clock)")
	}
	if err := s.observe(req.Ts); err != nil {
		return nil, err
	}
	a := s.store.ByName(req.Region)
	if a == nil {
		return nil, s.notServedHere(req.Region)
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

// Backup implements kvpb.AdminServer: backup.Create over this store's
// bucket, driven from here (storeCluster).
func (s *KV) Backup(ctx context.Context, req *kvpb.BackupRequest) (*kvpb.BackupResponse, error) {
	if err := backup.CheckID(req.Id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rec, err := backup.Create(ctx, s.store.opts.Region.Bucket, storeCluster{s}, req.Id)
	switch {
	case errors.Is(err, backup.ErrExists):
		return nil, status.Error(codes.AlreadyExists, err.Error())
	case err != nil:
		// A region's refusal keeps its code (a clock refusal, a timeout).
		if code := status.Code(err); code != codes.Unknown {
			return nil, status.Error(code, err.Error())
		}
		return nil, status.Error(codes.Aborted, err.Error())
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &kvpb.BackupResponse{BackupJson: data}, nil
}

// DeleteBackup implements kvpb.AdminServer: backup.Delete in this store's
// bucket.
func (s *KV) DeleteBackup(ctx context.Context, req *kvpb.DeleteBackupRequest) (*kvpb.DeleteBackupResponse, error) {
	if err := backup.CheckID(req.Id); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	n, err := backup.Delete(ctx, s.store.opts.Region.Bucket, req.Id)
	switch {
	case errors.Is(err, backup.ErrNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &kvpb.DeleteBackupResponse{FilesRemoved: int64(n)}, nil
}

// ListBackups implements kvpb.AdminServer.
func (s *KV) ListBackups(ctx context.Context, _ *kvpb.ListBackupsRequest) (*kvpb.ListBackupsResponse, error) {
	b := s.store.opts.Region.Bucket
	all, err := backup.List(ctx, b)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	running, err := backup.Running(ctx, b)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if all == nil {
		all = []backup.Backup{}
	}
	data, err := json.Marshal(all)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &kvpb.ListBackupsResponse{BackupsJson: data, Running: running}, nil
}

// storeCluster is backup.Cluster as a store drives it: the timestamp from
// this store's clock, each region checkpointed here if this store has it
// open, else at its owners through the forwarding router, retried while
// the region moves or its owner restarts.
type storeCluster struct{ s *KV }

func (c storeCluster) Timestamp(context.Context) (uint64, error) { return c.s.store.Clock().Now(), nil }

// checkpointRetry bounds how long a region's checkpoint is retried while
// it has no reachable owner (a store restarting, a region moving).
const checkpointRetry = time.Minute

func (c storeCluster) Checkpoint(ctx context.Context, name string, ts uint64) (backup.Region, error) {
	req := &kvpb.CheckpointRequest{Region: name, Ts: ts}
	deadline := time.Now().Add(checkpointRetry)
	wait := 50 * time.Millisecond
	for {
		resp, err := c.once(ctx, req)
		if err == nil {
			var out backup.Region
			if err := json.Unmarshal(resp.RegionJson, &out); err != nil {
				return backup.Region{}, fmt.Errorf("decoding %s's checkpoint: %w", name, err)
			}
			return out, nil
		}
		if code := status.Code(err); (code != codes.NotFound && code != codes.OutOfRange && code != codes.Unavailable) || time.Now().After(deadline) {
			return backup.Region{}, err
		}
		select {
		case <-ctx.Done():
			return backup.Region{}, errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// once checkpoints region req.Region here or at its first owner.
func (c storeCluster) once(ctx context.Context, req *kvpb.CheckpointRequest) (*kvpb.CheckpointResponse, error) {
	s := c.s
	if a := s.store.ByName(req.Region); a != nil {
		if _, err := a.Engine(); err == nil {
			return s.Checkpoint(ctx, req)
		}
	}
	if s.fwd == nil {
		return nil, status.Errorf(codes.NotFound, "region %s is not open at this store, and it forwards to no peers", req.Region)
	}
	owners, gen := s.fwd.Router.Owners(req.Region)
	if len(owners) == 0 {
		s.fwd.Router.Refresh(gen)
		return nil, status.Errorf(codes.Unavailable, "no peer serves region %s now", req.Region)
	}
	lease, err := s.fwd.Router.Acquire(ctx, owners[0])
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	resp, err := kvpb.NewAdminClient(lease.Conn()).Checkpoint(ctx, req)
	if err != nil {
		s.fwd.Router.Refresh(gen)
	}
	return resp, err
}
