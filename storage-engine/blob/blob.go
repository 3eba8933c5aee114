// Package blob is the engine's access to the bucket that holds region files
// and manifests, through gocloud.dev/blob: file:// (the embedded default and
// what tests use), mem://, s3:// (AWS S3, MinIO and other S3-compatible
// stores), gs:// and azblob:// all work by URL.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	gblob "gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	// The local drivers are always linked; the cloud drivers are linked by
	// package blob/clouddrivers, which the bellows binary imports, so test
	// binaries stay small.
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/memblob"
)

var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("blob: object not found")
	// ErrExists: a create-if-absent write found the object already there.
	ErrExists = errors.New("blob: object already exists")
)

// SupportedSchemes are the URL schemes Open accepts.
var SupportedSchemes = []string{"file", "mem", "s3", "gs", "azblob"}

// Bucket wraps a gocloud bucket with the operations the engine needs.
type Bucket struct {
	b      *gblob.Bucket
	url    string
	scheme string
	// prefix is prepended to every key. gocloud's PrefixedBucket closes the
	// bucket it wraps, but regions share one bucket, so the view is ours.
	prefix string
	// onRead, if set, is called before every read of an object opened with
	// OpenObject (see WithReadHook).
	onRead ReadHook
	cost   CostModel
	// root is a file bucket's directory (Copy links files there).
	root string
}

// Open opens the bucket at rawURL.
func Open(ctx context.Context, rawURL string) (*Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("blob: bucket URL %q: %w", rawURL, err)
	}
	ok := false
	for _, s := range SupportedSchemes {
		ok = ok || u.Scheme == s
	}
	if !ok {
		return nil, fmt.Errorf("blob: bucket URL %q: unsupported scheme %q (supported: %v)", rawURL, u.Scheme, SupportedSchemes)
	}
	cost, err := takeCostModel(u)
	if err != nil {
		return nil, fmt.Errorf("blob: bucket URL %q: %w", rawURL, err)
	}
	openURL := u.String()
	if u.Scheme == "file" {
		if err := os.MkdirAll(u.Path, 0o755); err != nil {
			return nil, fmt.Errorf("blob: creating bucket directory %s: %w", u.Path, err)
		}
		q := u.Query()
		// The engine keeps its own checksums; fileblob's sidecar files would
		// double the files and MD5 every byte written.
		if !q.Has("metadata") {
			q.Set("metadata", "skip")
		}
		// fileblob writes a temporary file and renames it into place. In
		// os.TempDir, the rename fails (EXDEV) for a bucket on another
		// mount (a volume in a pod), and a process killed mid-write leaves
		// the file in /tmp for good; next to the object it always renames,
		// and List hides it (tempObject).
		q.Set("no_tmp_dir", "1")
		u.RawQuery = q.Encode()
		openURL = u.String()
	}
	b, err := gblob.OpenBucket(ctx, openURL)
	if err != nil {
		return nil, fmt.Errorf("blob: opening bucket %q: %w", rawURL, err)
	}
	bucket := &Bucket{b: b, url: rawURL, scheme: u.Scheme, cost: cost}
	if u.Scheme == "file" {
		bucket.root = u.Path
	}
	return bucket, nil
}

// URL is the URL the bucket was opened with.
func (b *Bucket) URL() string { return b.url }

// Prefixed returns a view of the bucket whose keys are under prefix.
func (b *Bucket) Prefixed(prefix string) *Bucket {
	return &Bucket{b: b.b, url: b.url, scheme: b.scheme, prefix: b.prefix + prefix, onRead: b.onRead, cost: b.cost, root: b.root}
}

func translate(key string, err error) error {
	if err == nil {
		return nil
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("blob: %s: %w", key, err)
}

// WriteAll writes data to key. With ifNotExist the write fails with ErrExists
// instead of replacing an existing object: the manifest's fencing relies on it.
func (b *Bucket) WriteAll(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	if err := b.cost.writeWait(ctx, int64(len(data))); err != nil {
		return translate(key, err)
	}
	if ifNotExist && b.root != "" {
		return b.createFile(key, data)
	}
	opts := &gblob.WriterOptions{IfNotExist: ifNotExist, ContentType: "application/octet-stream"}
	err := b.b.WriteAll(ctx, b.prefix+key, data, opts)
	if ifNotExist && gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return fmt.Errorf("%w: %s", ErrExists, key)
	}
	return translate(key, err)
}

// createFile writes a file bucket's object key only if it does not exist,
// atomically: fileblob's IfNotExist checks that the file is absent and then
// renames its temporary file over it, so two writers racing for one key
// could both succeed, the second replacing the first (a manifest or region
// map epoch committed twice). A hard link fails if its name exists, so of
// racing writers exactly one creates the object.
func (b *Bucket) createFile(key string, data []byte) error {
	to := filepath.Join(b.root, filepath.FromSlash(b.prefix+key))
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("blob: %s: %w", key, err)
	}
	// Named as fileblob names its temporary files, which List hides, with
	// a random part: racing writers of one key start in the same
	// nanosecond.
	f, err := os.CreateTemp(filepath.Dir(to), filepath.Base(to)+".*.tmp")
	if err != nil {
		return fmt.Errorf("blob: %s: %w", key, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("blob: %s: %w", key, err)
	}
	if err := os.Link(tmp, to); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		return fmt.Errorf("blob: %s: %w", key, err)
	}
	return nil
}

// NewWriter streams a new object to key; it becomes visible on Close.
func (b *Bucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	w, err := b.b.NewWriter(ctx, b.prefix+key, &gblob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return nil, translate(key, err)
	}
	if b.cost.writes() {
		return &costedWriter{WriteCloser: w, ctx: ctx, cost: b.cost}, nil
	}
	return w, nil
}

// ReadAll reads a whole object: one GET, which the cost model charges as
// it charges a ranged read.
func (b *Bucket) ReadAll(ctx context.Context, key string) ([]byte, error) {
	d, err := b.b.ReadAll(ctx, b.prefix+key)
	if err == nil {
		err = b.cost.wait(ctx, int64(len(d)))
	}
	return d, translate(key, err)
}

// Copy copies object src to dst inside the bucket. S3, GCS and Azure copy
// inside the service; nothing passes through this process. A file bucket
// hard-links the file, which is the same to it: its objects are never
// written in place (fileblob renames a new file over an old one), so the
// link is a copy that costs no bytes. A copy is whole or absent: the
// drivers write dst in one piece, and a link is renamed into place.
func (b *Bucket) Copy(ctx context.Context, dst, src string) error {
	if !b.link(dst, src) {
		if err := translate(src, b.b.Copy(ctx, b.prefix+dst, b.prefix+src, nil)); err != nil {
			return err
		}
	}
	if !b.cost.active() {
		return nil
	}
	a, err := b.b.Attributes(ctx, b.prefix+dst)
	if err != nil {
		return translate(dst, err)
	}
	return b.cost.wait(ctx, a.Size)
}

// link hard-links src to dst in a file bucket; false: not a file bucket,
// or the link failed (another file system), and Copy copies the bytes.
func (b *Bucket) link(dst, src string) bool {
	if b.root == "" {
		return false
	}
	from := filepath.Join(b.root, filepath.FromSlash(b.prefix+src))
	to := filepath.Join(b.root, filepath.FromSlash(b.prefix+dst))
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return false
	}
	// Named as fileblob names its temporary files, which List hides: a
	// process killed between the two steps leaves no object.
	tmp := fmt.Sprintf("%s.%x.tmp", to, time.Now().UnixNano())
	if err := os.Link(from, tmp); err != nil {
		return false
	}
	if err := os.Rename(tmp, to); err != nil {
		_ = os.Remove(tmp)
		return false
	}
	return true
}

// CopyTo copies object src of this bucket to dst in another bucket,
// streaming it through this process (a copy between buckets cannot stay
// inside one service).
func (b *Bucket) CopyTo(ctx context.Context, to *Bucket, dst, src string) (err error) {
	r, err := b.b.NewReader(ctx, b.prefix+src, nil)
	if err != nil {
		return translate(src, err)
	}
	defer r.Close()
	// Cancelling the writer's context before Close discards what it
	// wrote: a failed copy leaves no partial object.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := to.b.NewWriter(wctx, to.prefix+dst, &gblob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return translate(dst, err)
	}
	n, err := io.Copy(w, r)
	if err == nil {
		err = b.cost.wait(ctx, n)
	}
	if err == nil {
		err = to.cost.writeWait(ctx, n)
	}
	if err != nil {
		cancel()
		_ = w.Close()
		return fmt.Errorf("blob: copying %s to %s: %w", src, dst, err)
	}
	return translate(dst, w.Close())
}

// Delete removes key; deleting a missing object is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	err := translate(key, b.b.Delete(ctx, b.prefix+key))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Exists reports whether key exists.
func (b *Bucket) Exists(ctx context.Context, key string) (bool, error) {
	ok, err := b.b.Exists(ctx, b.prefix+key)
	return ok, translate(key, err)
}

// ObjectInfo describes a listed object.
type ObjectInfo struct {
	Key  string
	Size int64
}

// tempObject matches fileblob's temporary files (no_tmp_dir): the object's
// name, "." and the creation time in hex, ".tmp". One is left behind by a
// process killed while writing; it is never an object.
var tempObject = regexp.MustCompile(`\.[0-9a-f]+\.tmp$`)

// List returns every object whose key starts with prefix.
func (b *Bucket) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	for attempt := 0; ; attempt++ {
		out, err := b.list(ctx, prefix)
		// fileblob reads a directory, then stats each entry: a write that
		// renames its temporary file in between makes the stat fail with
		// NotFound. The listing is retried; object stores list atomically.
		if b.scheme == "file" && errors.Is(err, ErrNotFound) && attempt < 10 {
			continue
		}
		return out, err
	}
}

func (b *Bucket) list(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	it := b.b.List(&gblob.ListOptions{Prefix: b.prefix + prefix})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, translate(prefix, err)
		}
		if !o.IsDir && !(b.scheme == "file" && tempObject.MatchString(o.Key)) {
			out = append(out, ObjectInfo{Key: strings.TrimPrefix(o.Key, b.prefix), Size: o.Size})
		}
	}
}

// Dirs returns the names of the "directories" directly under prefix (which
// ends in "/"): the distinct next path segments of its keys, without the
// trailing "/". One level is listed, not every key beneath it: a listing of
// a tree that writers fill (a WAL archive's parts) costs its whole size.
// A file bucket reads the one directory: fileblob's delimiter listing
// still walks, and stats, every file beneath, which races with every write
// (createFile's temporary file comes and goes).
func (b *Bucket) Dirs(ctx context.Context, prefix string) ([]string, error) {
	if b.scheme == "file" {
		entries, err := os.ReadDir(filepath.Join(b.root, filepath.FromSlash(b.prefix+prefix)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("blob: listing %s: %w", prefix, err)
		}
		var out []string
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, e.Name())
			}
		}
		return out, nil
	}
	var out []string
	it := b.b.List(&gblob.ListOptions{Prefix: b.prefix + prefix, Delimiter: "/"})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, translate(prefix, err)
		}
		if o.IsDir {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(o.Key, b.prefix+prefix), "/"))
		}
	}
}

// Object is an open object read at random offsets, as SST readers do.
type Object interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// Open opens key for random reads. On file:// buckets it keeps the file open
// and reads with pread (reached through gocloud's As escape hatch), so a
// block read costs one system call; elsewhere every ReadAt is a ranged GET.
func (b *Bucket) OpenObject(ctx context.Context, key string) (Object, error) {
	o, err := b.openObject(ctx, key)
	if err != nil {
		return o, err
	}
	if b.cost.active() {
		// Readers keep objects open across requests: the wait must not
		// end with the context of the open.
		o = &costedObject{Object: o, ctx: context.WithoutCancel(ctx), cost: b.cost}
	}
	if b.onRead == nil {
		return o, nil
	}
	return &hookedObject{Object: o, ctx: ctx, hook: b.onRead}, nil
}

func (b *Bucket) openObject(ctx context.Context, key string) (Object, error) {
	if b.scheme == "file" {
		var f *os.File
		r, err := b.b.NewReader(ctx, b.prefix+key, &gblob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
			as(&f)
			return nil
		}})
		if err != nil {
			return nil, translate(key, err)
		}
		if f != nil {
			return &fileObject{r: r, f: f, size: r.Size()}, nil
		}
		_ = r.Close()
	}
	attrs, err := b.b.Attributes(ctx, b.prefix+key)
	if err != nil {
		return nil, translate(key, err)
	}
	return &rangeObject{b: b.b, key: b.prefix + key, size: attrs.Size}, nil
}

type fileObject struct {
	r    *gblob.Reader
	f    *os.File
	size int64
}

func (o *fileObject) ReadAt(p []byte, off int64) (int, error) { return o.f.ReadAt(p, off) }
func (o *fileObject) Size() int64                             { return o.size }
func (o *fileObject) Close() error                            { return o.r.Close() }

type rangeObject struct {
	b    *gblob.Bucket
	key  string
	size int64
}

func (o *rangeObject) ReadAt(p []byte, off int64) (int, error) {
	r, err := o.b.NewRangeReader(context.Background(), o.key, off, int64(len(p)), nil)
	if err != nil {
		return 0, translate(o.key, err)
	}
	defer r.Close()
	n, err := io.ReadFull(r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return n, err
}
func (o *rangeObject) Size() int64  { return o.size }
func (o *rangeObject) Close() error { return nil }

// Close closes the bucket, and with it every prefixed view of it.
func (b *Bucket) Close() error { return b.b.Close() }
