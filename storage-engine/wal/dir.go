package wal

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrDirLocked means another handle (in this or another process) holds the
// WAL directory.
var ErrDirLocked = errors.New("wal: directory is in use")

const (
	lockFile     = "LOCK"
	identityFile = "IDENTITY"
)

// Dir is exclusive use of a WAL directory plus the directory's identity: a
// random ID created with it. A region's manifest records the identity of the
// WAL that may hold its unflushed writes, which is how a store tells "my own
// region after a restart" from "a region another store still owns".
type Dir struct {
	Path string
	// ID is stable for the life of the directory's contents.
	ID string
	f  *os.File
}

// LockDir creates dir if needed, takes an exclusive flock on dir/LOCK and
// reads (or creates) dir/IDENTITY. The lock dies with the process, so a
// SIGKILLed owner never leaves it behind.
func LockDir(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process or region handle", ErrDirLocked, dir)
		}
		return nil, fmt.Errorf("wal: locking %s: %w", dir, err)
	}
	id, err := readOrCreateIdentity(dir)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Dir{Path: dir, ID: id, f: f}, nil
}

// ReadIdentity reads the identity of WAL directory dir without creating
// one or taking its lock; ok is false when dir has none (never opened).
func ReadIdentity(dir string) (id string, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("wal: %w", err)
	}
	id = strings.TrimSpace(string(data))
	return id, id != "", nil
}

func readOrCreateIdentity(dir string) (string, error) {
	path := filepath.Join(dir, identityFile)
	data, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(data))
		if id == "" {
			return "", fmt.Errorf("wal: %s is empty; remove it only if the directory holds no unflushed data", path)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("wal: %w", err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("wal: generating identity: %w", err)
	}
	id := hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := writeSynced(tmp, []byte(id+"\n")); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("wal: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return "", err
	}
	return id, nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: writing %s: %w", path, err)
	}
	return nil
}

// RemoveSegments deletes every segment in the directory: they belong to an
// earlier tenure whose writes are all in SSTs (the region was released) or
// were forfeited by a forced takeover, and replaying them would resurrect
// versions the current manifest does not account for.
func (d *Dir) RemoveSegments() error {
	segs, err := Segments(d.Path)
	if err != nil {
		return err
	}
	for _, s := range segs {
		if err := os.Remove(filepath.Join(d.Path, SegmentName(s))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: removing segment %d: %w", s, err)
		}
	}
	if len(segs) > 0 {
		return syncDir(d.Path)
	}
	return nil
}

// Unlock releases the directory.
func (d *Dir) Unlock() error {
	if d == nil || d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}
