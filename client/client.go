// Package client is the Go client of a Bellows cluster.
//
// New dials one or more seed addresses — a store, or the cluster's client
// Service — and learns the regions: which key range each holds and which
// store serves it (every store's Regions answer, and the peer stores each
// one lists). A request goes straight to its region's owner; when the client
// cannot reach the owners (outside the cluster, only the Service is
// reachable) it goes to a seed, and that store forwards it.
//
// Credentials. Options.DialOptions gives them (WithTLSDir; Options.Token);
// with Options.FindCredentials the client finds them as the bellows
// command line does: bellows local's client certificate for a TLS store on
// this machine (make run), BELLOWS_TLS_DIR and BELLOWS_TOKEN, or the
// client configuration file's context. New fails at once when a seed
// speaks TLS and the client does not, or the other way round
// (ErrTLSMismatch), and gives up after Options.DialTimeout when no seed
// answers.
//
// Retries. A request that fails because the route was stale — the owner is
// gone or restarting (UNAVAILABLE), or no longer serves the key's region
// (OUT_OF_RANGE, FAILED_PRECONDITION of a fenced region) — refreshes the
// table and is tried again with exponential backoff, until it succeeds or
// the caller's context ends. A region failing over (its store's liveness
// lease ran out: UNAVAILABLE, reason LEASE_EXPIRED or REGION_FAILING_OVER;
// docs/failover.md) is one such: the request reaches the new owner once it
// has opened the region. When the context ends first, the error matches
// the context's error and carries the last answer: UNAVAILABLE when that
// was, with its details, so the caller sees only codes it may retry on
// (IsFailingOver tells a failover). Writes are retried too: each logical write
// carries one idempotency key (contract.RequestIDHeader) on every attempt,
// so a store that applied an attempt whose answer was lost answers the
// retry with the first result instead of applying it twice (the store's
// dedupe.go says what that does not cover: a duplicate reaching a store
// restarted after a crash). Any other error is returned at once.
//
// Consistency. Each region orders its own writes (commit timestamps are per
// region). A Scan over several regions reads each region in turn; it is not
// a snapshot of the whole key space. Batch is atomic wherever its keys
// fall (across regions by a two-phase commit); a transaction (Txn) reads
// and writes atomically.
// CompareAndSet and CompareAndDelete write one key only if it holds what a
// Condition expects (IfAbsent, IfValue, IfVersion): linearizable per key.
//
// Concurrency: a Client is safe for concurrent use. Lock order: Client.mu
// (connections) is never held while calling a store.
package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/clientcreds"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// DialOptions are used for every connection; default: plaintext, or
	// what FindCredentials finds.
	DialOptions []grpc.DialOption
	// Dialer, when set, opens every connection to a store, given the
	// store's address as the stores name each other (a pod's DNS name, an
	// IP), with gRPC's name resolution skipped (its passthrough resolver):
	// for a dialer that alone knows where a name leads, such as a
	// port-forward to a pod from outside its cluster. Without it, gRPC
	// resolves each address by DNS first and dials what that gives.
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// FindCredentials, when DialOptions gives none, finds the cluster's
	// credentials the way the bellows command line (bellows kv) does:
	//
	//   - a TLS directory (tls.crt, tls.key, ca.crt; WithTLSDir): the
	//     environment's BELLOWS_TLS_DIR, else the context's tls-dir;
	//   - a token presented instead of a certificate: BELLOWS_TOKEN or
	//     BELLOWS_TOKEN_FILE, else the context's token-file (see Token);
	//   - neither, and every seed on this machine (a loopback address)
	//     and serving TLS: the client certificate of bellows local (make
	//     run), in the user's configuration directory
	//     (~/.config/bellows/local-tls/client);
	//   - else plaintext.
	//
	// The context is the client configuration file's (BELLOWS_CONFIG,
	// default ~/.config/bellows/config.yaml; docs/security.md) named by
	// BELLOWS_CONTEXT, else its current-context; its addr gives the seeds
	// when New is given none. A malformed file or token fails New.
	FindCredentials bool
	// Token, when set, is sent with every call as "authorization: Bearer
	// TOKEN" (WithToken): a client that authenticates with a token instead
	// of a certificate (docs/security.md). A token is sent over TLS only:
	// DialOptions must then give transport credentials that trust the
	// cluster's CA, e.g. credentials.NewClientTLSFromFile("ca.crt",
	// "bellows-node") (every store's certificate names bellows-node).
	Token string
	// DialTimeout bounds how long New tries to reach a seed and learn the
	// regions, as etcd's clientv3.Config.DialTimeout bounds its dial: New
	// gives up after the sooner of it and ctx's deadline. Zero: 5s when
	// ctx has no deadline (ctx's deadline otherwise); negative: ctx alone,
	// which may be never.
	DialTimeout time.Duration
	// RegionsTimeout bounds one store's Regions answer during a refresh: a
	// store that does not answer in time is not used as an owner until a
	// later refresh. Default 2s.
	RegionsTimeout time.Duration
	// RetryInitial and RetryMax bound the backoff between attempts of one
	// request. Defaults 20ms and 1s.
	RetryInitial, RetryMax time.Duration
	// Retrying, when set, is told of each store's answer a request is
	// about to retry (after a refresh, before its backoff): a region
	// moving or failing over, a store restarting. FailingOverOf reads
	// which region is failing over, and from which store. It is called
	// from the requests' goroutines, concurrently, and must not block.
	Retrying func(err error)
	// Logger reports refreshes that reach no store; nil discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if len(o.DialOptions) == 0 {
		o.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	// Before the caller's options, which may override it: an answer with a
	// largest value (a Get, a scan chunk) is larger than gRPC's 4 MiB
	// default.
	o.DialOptions = append([]grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageBytes))}, o.DialOptions...)
	if o.RegionsTimeout <= 0 {
		o.RegionsTimeout = 2 * time.Second
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 20 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Client reads and writes a Bellows cluster.
type Client struct {
	seeds []string
	opts  Options

	table   atomic.Pointer[table]
	refresh singleflight.Group

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn // by address
	closed bool
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("bellows client: closed")

// defaultDialTimeout bounds New when neither Options.DialTimeout nor its
// ctx does.
const defaultDialTimeout = 5 * time.Second

// New returns a client of the cluster reached at seeds (host:port, at least
// one, unless FindCredentials finds a context that names them) and learns
// its regions.
//
// New tries until a seed answers or Options.DialTimeout passes (default
// 5s when ctx has no deadline, else ctx's deadline), retrying what may
// pass: a seed that refuses the connection (a store restarting) or does
// not answer in time. It fails at once, without retrying, when every
// seed answers in a way asking again does not change: the store refuses
// the client's credentials (codes.Unauthenticated, PermissionDenied), the
// seed speaks TLS and the client plaintext or the other way round
// (ErrTLSMismatch), or the seed is not a store (ErrNotAStore: a compaction
// worker, a metrics port). Either way the error names each seed and why
// it failed, so a wrong address or missing credentials fail here, not on
// the first request.
func New(ctx context.Context, seeds []string, opts Options) (*Client, error) {
	seeds = slices.DeleteFunc(slices.Clone(seeds), func(s string) bool { return strings.TrimSpace(s) == "" })
	if opts.FindCredentials && len(opts.DialOptions) == 0 {
		var err error
		if seeds, opts.DialOptions, err = findCredentials(seeds, opts.Token); err != nil {
			return nil, err
		}
		opts.Token = "" // in DialOptions now
	}
	if len(seeds) == 0 {
		return nil, errors.New("bellows client: no seed address given")
	}
	if opts.Token != "" {
		if len(opts.DialOptions) == 0 {
			return nil, errors.New("bellows client: Options.Token is sent over TLS only: give DialOptions with transport credentials that trust the cluster's CA")
		}
		opts.DialOptions = append(slices.Clone(opts.DialOptions), WithToken(opts.Token))
	}
	opts.ensureDefaults()
	bound := "ctx's deadline"
	if _, ok := ctx.Deadline(); opts.DialTimeout > 0 || opts.DialTimeout == 0 && !ok {
		d := cmp.Or(max(opts.DialTimeout, 0), defaultDialTimeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		bound = fmt.Sprintf("%v (Options.DialTimeout)", d)
	}
	c := &Client{seeds: seeds, opts: opts, conns: map[string]*grpc.ClientConn{}}
	c.table.Store(&table{})
	from := strings.Join(seeds, ",")
	// last is the failure to report: the last attempt's that was not only
	// a timeout. An attempt that ctx's end (or RegionsTimeout) cut short, a
	// TLS handshake in flight say, says less than a refusal before it.
	var last error
	identified := map[string]*SeedError{} // by seed: what it is, asked once
	for {
		t, err := c.rebuild(ctx)
		if err == nil && len(t.regions) > 0 {
			return c, nil
		}
		if err == nil {
			err = errors.New("no store lists any region yet")
		}
		if last == nil || !timedOut(err) {
			last = err
		}
		if refusedCredentials(err) {
			// Every store that answered refused who we are: asking again
			// until ctx ends would only hide the refusal behind a timeout.
			_ = c.Close()
			return nil, fmt.Errorf("bellows client: learning the regions from %s: %w", from, err)
		}
		// A seed is identified by dialling it directly, which a Dialer's
		// names may not allow.
		if opts.Dialer == nil {
			if wrong := wrongSeeds(err, identified); len(wrong) > 0 {
				_ = c.Close()
				return nil, fmt.Errorf("bellows client: learning the regions from %s: %w", from, errors.Join(wrong...))
			}
		}
		select {
		case <-ctx.Done():
			_ = c.Close()
			return nil, fmt.Errorf("bellows client: learning the regions from %s: no answer within %s: %w (%w)", from, bound, last, ctx.Err())
		case <-time.After(opts.RetryInitial): // backoff between attempts, not synchronisation
		}
	}
}

// wrongSeeds is what each seed is when every one of them failed err, a
// rebuild's failure, in a way retrying does not mend (identify); else nil.
// A seed is looked at once (identified keeps what it is).
func wrongSeeds(err error, identified map[string]*SeedError) []error {
	errs := rebuildAnswers(err)
	if len(errs) == 0 {
		return nil
	}
	var wrong []error
	for _, e := range errs {
		f, ok := errors.AsType[*seedFailure](e)
		if !ok {
			return nil
		}
		id, seen := identified[f.addr]
		if !seen {
			id = identify(f.addr, f.err)
			identified[f.addr] = id
		}
		if id == nil {
			return nil
		}
		wrong = append(wrong, id)
	}
	return wrong
}

// findCredentials is Options.FindCredentials: the seeds (the context's
// addr when none are given) and the dial options of the credentials the
// environment, the client configuration's context and bellows local
// give. token, when given (Options.Token), wins over theirs.
func findCredentials(seeds []string, token string) ([]string, []grpc.DialOption, error) {
	fail := func(err error) ([]string, []grpc.DialOption, error) {
		return nil, nil, fmt.Errorf("bellows client: finding the credentials (Options.FindCredentials): %w", err)
	}
	cc, err := clientcreds.LoadContext("", "")
	if err != nil {
		return fail(err)
	}
	if len(seeds) == 0 && cc != nil && cc.Addr != "" {
		if seeds, err = clientcreds.ParseSeeds(cc.Source("addr"), cc.Addr); err != nil {
			return fail(err)
		}
	}
	dir, dirFrom := clientcreds.TLSDir(clientcreds.Setting{From: "the TLS directory"}, cc)
	tokenFrom := "Options.Token"
	if token == "" {
		if token, tokenFrom, err = clientcreds.Token(clientcreds.Setting{}, cc); err != nil {
			return fail(err)
		}
	}
	dial, err := clientcreds.Dial(dir, dirFrom, token, tokenFrom, seeds, WithToken)
	if err != nil {
		return fail(err)
	}
	return seeds, dial, nil
}

// Close closes every connection. Calls in progress fail.
func (c *Client) Close() error {
	c.mu.Lock()
	conns := c.conns
	c.conns, c.closed = nil, true
	c.mu.Unlock()
	var errs []error
	for _, cc := range conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// Regions returns the regions as the client last learned them, in key order.
func (c *Client) Regions() []Region { return slices.Clone(c.table.Load().regions) }

// Refresh learns the regions again now (a request does this by itself when
// it finds its route stale).
func (c *Client) Refresh(ctx context.Context) error {
	_, err := c.rebuild(ctx)
	return err
}

// conn is the connection to addr, dialled on first use and then kept.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	target, dial := addr, c.opts.DialOptions
	if c.opts.Dialer != nil {
		target, dial = "passthrough:///"+addr, append(slices.Clone(dial), grpc.WithContextDialer(c.opts.Dialer))
	}
	cc, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("bellows client: address %q: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// rebuild asks the seeds and every peer they list (and the peers of the
// last table) for their regions, and installs the table built from the
// answers — unless no store answered, when the last table stays.
func (c *Client) rebuild(ctx context.Context) (*table, error) {
	old := c.table.Load()
	asked := map[string]bool{}
	var answers []answer
	var errs []error
	round := func(addrs []string, seed bool) {
		var pending []string
		for _, a := range addrs {
			if !asked[a] {
				asked[a] = true
				pending = append(pending, a)
			}
		}
		got := make([]*answer, len(pending))
		fails := make([]error, len(pending))
		var wg sync.WaitGroup
		for i, addr := range pending {
			wg.Go(func() {
				resp, err := c.askRegions(ctx, addr)
				if err != nil {
					fails[i] = &seedFailure{addr: addr, err: err}
					return
				}
				got[i] = &answer{addr: addr, seed: seed, resp: resp}
			})
		}
		wg.Wait()
		for i := range pending {
			if got[i] != nil {
				answers = append(answers, *got[i])
			} else {
				errs = append(errs, fails[i])
			}
		}
	}
	round(c.seeds, true)
	var peers []string
	for _, a := range answers {
		peers = append(peers, a.resp.GetPeers()...)
	}
	round(append(peers, old.peers...), false)
	if len(answers) == 0 {
		err := &noAnswerError{errs: errs}
		c.opts.Logger.Warn("bellows client: refreshing the regions", "err", err)
		return old, err
	}
	t := buildTable(answers, old.gen+1)
	c.table.Store(t)
	return t, nil
}

// noAnswerError is a rebuild's failure: no store listed its regions, for
// the reasons errs gives, one per store asked.
type noAnswerError struct{ errs []error }

func (e *noAnswerError) Error() string   { return "no store answered: " + errors.Join(e.errs...).Error() }
func (e *noAnswerError) Unwrap() []error { return e.errs }

// timedOut reports whether err, a rebuild's failure, is only timeouts:
// every store asked ran out of time rather than answering.
func timedOut(err error) bool {
	errs := rebuildAnswers(err)
	if len(errs) == 0 {
		errs = []error{err}
	}
	return every(errs, func(e error) bool {
		return errors.Is(e, context.DeadlineExceeded) || status.Code(e) == codes.DeadlineExceeded
	})
}

// refusedCredentials reports whether err is a rebuild that every store
// answered by refusing the client's credentials (UNAUTHENTICATED, or
// PERMISSION_DENIED): not a failure that passes.
func refusedCredentials(err error) bool {
	errs := rebuildAnswers(err)
	return len(errs) > 0 && every(errs, func(e error) bool {
		c := status.Code(e) // status.Code sees through the address wrapping
		return c == codes.Unauthenticated || c == codes.PermissionDenied
	})
}

// rebuildAnswers is what each store answered to a rebuild that failed (a
// noAnswerError's errors), or nil if err is not one.
func rebuildAnswers(err error) []error {
	if na, ok := errors.AsType[*noAnswerError](err); ok {
		return na.errs
	}
	return nil
}

// every reports whether ok holds for each of errs.
func every(errs []error, ok func(error) bool) bool {
	for _, e := range errs {
		if !ok(e) {
			return false
		}
	}
	return true
}

func (c *Client) askRegions(ctx context.Context, addr string) (*kvpb.RegionsResponse, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.RegionsTimeout)
	defer cancel()
	return kvpb.NewKVClient(cc).Regions(ctx, &kvpb.RegionsRequest{})
}

// refreshAfter rebuilds the table unless it changed since generation seen
// (another request refreshed it meanwhile); concurrent callers share one
// rebuild. A rebuild serves every waiting request, so it does not run under
// one caller's context, only under RegionsTimeout per store.
func (c *Client) refreshAfter(seen uint64) {
	if c.table.Load().gen != seen {
		return
	}
	_, _, _ = c.refresh.Do("", func() (any, error) {
		if c.table.Load().gen != seen {
			return nil, nil
		}
		return c.rebuild(context.Background())
	})
}

// staleRoute reports whether err says the request went to a store that does
// not (or does not yet, or no longer) serve its region, or could not be
// reached: after a refresh another store, or the same one later, may.
// Nothing was applied in those cases, or the idempotency key makes the
// retry answer with what was.
func staleRoute(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.OutOfRange:
		return true
	case codes.FailedPrecondition:
		// A fenced store; not a refusal any store would repeat.
		return !hasReason(err, contract.SnapshotTooOldReason) && !hasReason(err, contract.TxnEndedReason)
	}
	return false
}

// targets are the addresses to try for key, in order, and the table's
// generation they came from: the owners, else the seeds (which forward).
func (c *Client) targets(key []byte) ([]string, uint64) {
	t := c.table.Load()
	if r, ok := t.lookup(key); ok && len(r.Owners) > 0 {
		return r.Owners, t.gen
	}
	return c.seeds, t.gen
}

// do runs call against the stores that should serve key until one answers,
// refreshing the table and backing off between rounds while the failures
// say the route was stale, until ctx ends.
func do[T any](ctx context.Context, c *Client, key []byte, call func(context.Context, kvpb.KVClient) (T, error)) (T, error) {
	v, _, err := doAddr(ctx, c, key, call)
	return v, err
}

// doAddr is do, also returning the address of the store that answered.
func doAddr[T any](ctx context.Context, c *Client, key []byte, call func(context.Context, kvpb.KVClient) (T, error)) (T, string, error) {
	var answered string
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = c.opts.RetryInitial, c.opts.RetryMax
	var stale error // the last stale-route answer (an *answerError)
	round := func() (T, error) {
		var zero T
		addrs, gen := c.targets(key)
		for _, addr := range addrs {
			cc, err := c.conn(addr)
			if err != nil {
				return zero, backoff.Permanent(err)
			}
			v, err := call(ctx, kvpb.NewKVClient(cc))
			if err == nil {
				answered = addr
				return v, nil
			}
			if ctx.Err() != nil || !staleRoute(err) {
				return zero, backoff.Permanent(err)
			}
			stale = c.answer(key, addr, err)
		}
		c.refreshAfter(gen)
		return zero, stale
	}
	v, err := backoff.Retry(ctx, round, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, _ time.Duration) { c.retrying(err) }))
	if stale != nil && ended(ctx, err) {
		// The caller's context ended the retries, in a backoff or in a
		// call: say so, with the last store's answer.
		return v, "", gaveUp(ctx.Err(), stale)
	}
	return v, answered, err
}

// doAt runs call against the store at addr, retrying while it answers
// UNAVAILABLE (restarting, say), until ctx ends; attempts is how many
// calls were made.
func doAt[T any](ctx context.Context, c *Client, addr string, call func(context.Context, kvpb.KVClient) (T, error)) (v T, attempts int, err error) {
	cc, err := c.conn(addr)
	if err != nil {
		return v, 0, err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = c.opts.RetryInitial, c.opts.RetryMax
	var stale error // the last UNAVAILABLE
	v, err = backoff.Retry(ctx, func() (T, error) {
		attempts++
		v, err := call(ctx, kvpb.NewKVClient(cc))
		if err != nil && (ctx.Err() != nil || status.Code(err) != codes.Unavailable) {
			return v, backoff.Permanent(err)
		}
		if err != nil {
			stale = c.answer(nil, addr, err)
			return v, stale
		}
		return v, nil
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, _ time.Duration) { c.retrying(err) }))
	if stale != nil && ended(ctx, err) {
		err = gaveUp(ctx.Err(), stale)
	}
	return v, attempts, err
}

// withRequestID gives a logical write its idempotency key, the same on
// every attempt.
func withRequestID(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, contract.RequestIDHeader, rand.Text())
}

// WriteResult is where and when a write was applied.
type WriteResult struct {
	Region string
	// CommitTS is the write's timestamp within its region.
	CommitTS uint64
}

// Get reads key's newest value; found is false when the key has none.
func (c *Client) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	return c.get(ctx, &kvpb.GetRequest{Key: key})
}

// GetAt reads the value of key visible at readTS in its region.
func (c *Client) GetAt(ctx context.Context, key []byte, readTS uint64) (value []byte, found bool, err error) {
	return c.get(ctx, &kvpb.GetRequest{Key: key, ReadTs: &readTS})
}

func (c *Client) get(ctx context.Context, req *kvpb.GetRequest) ([]byte, bool, error) {
	resp, err := c.getResponse(ctx, req)
	if err != nil {
		return nil, false, err
	}
	return resp.Value, resp.Found, nil
}

// getResponse is the answer to req from the key's region.
func (c *Client) getResponse(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	return do(ctx, c, req.Key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.GetResponse, error) {
		return kv.Get(ctx, req)
	})
}

// Put writes value under key. A key must be 1 to MaxKeyBytes long and a
// value at most MaxValueBytes; others fail at once with ErrEmptyKey,
// ErrKeyTooLarge or ErrValueTooLarge.
func (c *Client) Put(ctx context.Context, key, value []byte, opts ...WriteOption) (WriteResult, error) {
	if err := checkWrite(key, value); err != nil {
		return WriteResult{}, err
	}
	ttl, err := ttlOf(opts)
	if err != nil {
		return WriteResult{}, err
	}
	ctx = withRequestID(ctx)
	resp, err := do(ctx, c, key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.PutResponse, error) {
		return kv.Put(ctx, &kvpb.PutRequest{Key: key, Value: value, TtlMs: ttlMs(ttl)})
	})
	if err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Region: resp.Region, CommitTS: resp.CommitTs}, nil
}

// Delete removes key.
func (c *Client) Delete(ctx context.Context, key []byte) (WriteResult, error) {
	if err := checkKey(key); err != nil {
		return WriteResult{}, err
	}
	ctx = withRequestID(ctx)
	resp, err := do(ctx, c, key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.DeleteResponse, error) {
		return kv.Delete(ctx, &kvpb.DeleteRequest{Key: key})
	})
	if err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Region: resp.Region, CommitTS: resp.CommitTs}, nil
}

// Mutation is one write of a Batch: a put, or a delete when Delete is set.
type Mutation struct {
	Key, Value []byte
	Delete     bool
	// TTL, when positive, makes a put's value expire TTL after its commit
	// timestamp (WithTTL); 0: never. A delete takes none.
	TTL time.Duration
}

// ErrBatchSpansRegions was returned by a Batch whose keys fell in more than
// one region.
//
// Deprecated: such a batch commits across its regions; it is never
// returned.
var ErrBatchSpansRegions = errors.New("batch spans regions")

// Batch applies the mutations atomically, with one commit timestamp: all or
// none, wherever their keys fall. Within Put's limits each and
// MaxBatchBytes together (ErrBatchTooLarge). The store that owns mutation
// 0's region applies it: alone when every key is in that region (the fast
// path), else by a cross-region commit it coordinates, in one round trip
// from here either way; WriteResult.Region is mutation 0's region.
func (c *Client) Batch(ctx context.Context, muts []Mutation) (WriteResult, error) {
	if len(muts) == 0 {
		return WriteResult{}, errors.New("bellows client: empty batch")
	}
	if err := checkBatch(muts); err != nil {
		return WriteResult{}, err
	}
	req := &kvpb.BatchRequest{Mutations: make([]*kvpb.Mutation, len(muts))}
	for i, m := range muts {
		req.Mutations[i] = mutationPB(m)
	}
	ctx = withRequestID(ctx)
	resp, err := do(ctx, c, muts[0].Key, func(ctx context.Context, kv kvpb.KVClient) (*kvpb.BatchResponse, error) {
		return kv.Batch(ctx, req)
	})
	if err != nil {
		return WriteResult{}, err
	}
	return WriteResult{Region: resp.Region, CommitTS: resp.CommitTs}, nil
}
