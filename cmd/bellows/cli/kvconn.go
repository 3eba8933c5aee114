package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/clientcreds"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// defaultStoreAddr is where `bellows local` (make run) listens.
var defaultStoreAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(contract.StoreGRPCPort))

// parseSeeds splits --addr and gives an address without a port the
// store's port: gRPC would otherwise dial 443, the https default, and wait
// there until the timeout.
func parseSeeds(addr string) ([]string, error) {
	seeds, err := clientcreds.ParseSeeds("--addr", addr)
	if err != nil {
		return nil, err
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("--addr is empty: give HOST:PORT of a store or of the cluster's client Service (default %s)", defaultStoreAddr)
	}
	return seeds, nil
}

// commandContext bounds a kv command by --timeout (0: no bound) and ends it
// on Ctrl-C, so an interrupted scan still says where to resume.
func commandContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	if timeout < 0 {
		return nil, nil, fmt.Errorf("--timeout %v: must be 0 (no timeout) or more", timeout)
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	if timeout == 0 {
		return ctx, stop, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }, nil
}

// reachAny connects to each seed over TCP until one accepts. The client
// retries an unreachable seed until the deadline, since a store may be
// restarting; on the command line a refused connection almost always means
// a wrong address or no store, which is better said at once.
func reachAny(ctx context.Context, seeds []string) error {
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	for i, s := range seeds {
		wg.Go(func() {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", s)
			if err != nil {
				errs[i] = err
				return
			}
			_ = conn.Close()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return nil // let the command's own attempt report the timeout
	}
	var lines []string
	for i, err := range errs {
		lines = append(lines, fmt.Sprintf("%s: %s", seeds[i], netReason(err)))
	}
	return &userError{
		what: "cannot connect to " + strings.Join(lines, "; "),
		hint: fmt.Sprintf("is a store running there? `make run` (bellows local) starts one on %s; otherwise give --addr HOST:PORT of a store or of the cluster's client Service", defaultStoreAddr),
	}
}

// netReason is a dial error without the "dial tcp ADDR:" prefix.
func netReason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err.Error()
		}
		return op.Err.Error()
	}
	return err.Error()
}

// userError is a failure as the command line reports it: what went wrong,
// and what to do about it.
type userError struct {
	what, hint string
	cause      error
}

func (e *userError) Error() string {
	if e.hint == "" {
		return e.what
	}
	return e.what + "\n  hint: " + e.hint
}

func (e *userError) Unwrap() error { return e.cause }

// seedErrors are the seeds client.New named as no store it can talk to.
func seedErrors(err error) []*client.SeedError {
	var out []*client.SeedError
	var walk func(error)
	walk = func(err error) {
		if s, ok := err.(*client.SeedError); ok {
			out = append(out, s)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if e := u.Unwrap(); e != nil {
				walk(e)
			}
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// sayFailingOver is the client's Retrying hook of a kv command: each region
// failing over is said once on w (standard error), so a command that waits
// out a failover says what it waits for.
func sayFailingOver(w io.Writer) func(error) {
	var mu sync.Mutex
	said := map[string]bool{}
	return func(err error) {
		f, ok := client.FailingOverOf(err)
		if !ok {
			return
		}
		line := f.String() + "; retrying"
		mu.Lock()
		defer mu.Unlock()
		if !said[line] {
			said[line] = true
			fmt.Fprintln(w, line)
		}
	}
}

// grpcPrefix is how grpc-go renders a status; the code is said in words.
var grpcPrefix = regexp.MustCompile(`rpc error: code = \w+ desc = `)

// explain turns an error of a kv command into what went wrong and what to
// do, instead of gRPC's text. timeout is the command's --timeout.
func explain(err error, timeout time.Duration) error {
	var ue *userError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	text := grpcPrefix.ReplaceAllString(err.Error(), "")
	e := &userError{what: text, cause: err}
	if seeds := seedErrors(err); len(seeds) > 0 {
		// The client named what answered at each seed: a TLS mismatch,
		// or a server that is no store.
		var what []string
		for _, s := range seeds {
			what = append(what, s.Addr+" "+s.What)
		}
		e.what = strings.Join(what, "; ")
		switch s := seeds[0]; {
		case errors.Is(s, client.ErrNotAStore):
			e.hint = fmt.Sprintf("give --addr HOST:PORT of a store's gRPC port (bellows local prints it as the store's grpc=; %s by default) or of the cluster's client Service", defaultStoreAddr)
		case strings.Contains(s.What, "does not speak TLS"):
			e.hint = "the store is plaintext: give --tls-dir \"\" (or leave --tls-dir auto for a store on this machine)"
		case len(tokenSeeds) > 0 && strings.Contains(s.What, "requires a client certificate"):
			e.hint = tokenRefusedHint
		default:
			e.hint = "the store serves TLS: give --tls-dir with a client certificate of the cluster (for a store on this machine, --tls-dir auto finds bellows local's)"
		}
		return e
	}
	switch {
	case errors.Is(err, client.ErrValueTooLarge), errors.Is(err, client.ErrKeyTooLarge),
		errors.Is(err, client.ErrBatchTooLarge), errors.Is(err, client.ErrEmptyKey):
		e.hint = "the limits are in docs/guide/concepts.md#limits; nothing was sent"
	case errors.Is(err, client.ErrInvalidRange):
		e.hint = "give START before END, or leave END out to read to the last key"
	case errors.Is(err, client.ErrConflict):
		e.hint = "another write of that key committed after the transaction began; run it again (--retry does that)"
	case client.IsFailingOver(err) && !errors.Is(err, context.Canceled):
		f, _ := client.FailingOverOf(err)
		e.what = f.String()
		if errors.Is(err, context.DeadlineExceeded) {
			e.what = fmt.Sprintf("%s, and its new owner did not serve it within --timeout %v", f, timeout)
		}
		e.hint = "the cluster moves a dead store's regions to the live stores within seconds (docs/failover.md); retry, or give a longer --timeout (0: none). `bellows kv status` shows the regions failing over"
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		e.what = fmt.Sprintf("no answer within --timeout %v: %s", timeout, text)
		e.hint = "the store may be restarting, moving a region, overloaded or unreachable; `bellows kv status` shows which stores answer. Retry, or give a longer --timeout (0: none)"
		if h := tlsHint(text); h != "" {
			// The attempts before the deadline were refused for a reason
			// retrying does not mend.
			e.hint = h
		}
		if len(tokenSeeds) > 0 && demandsCertificate(tokenSeeds[0]) {
			// Each attempt's refusal (a broken pipe at the handshake) was
			// retried until the deadline.
			e.hint = tokenRefusedHint
		}
	case errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled:
		e.what = "interrupted: " + text
	default:
		switch status.Code(err) {
		case codes.Unavailable:
			e.hint = "a store is starting, stopping or handing the region over, or cannot be reached; retry, and see `bellows kv status`"
			if h := tlsHint(text); h != "" {
				e.hint = h
			}
			if len(tokenSeeds) > 0 && demandsCertificate(tokenSeeds[0]) {
				e.hint = tokenRefusedHint
			}
		case codes.ResourceExhausted:
			e.hint = "the request is larger than the store accepts; it may run an older version with smaller limits"
		case codes.InvalidArgument, codes.OutOfRange:
			e.hint = "the store refused the request as given; nothing was written"
		case codes.PermissionDenied:
			e.hint = "the role of the certificate in --tls-dir does not allow this call: use one with the role named (read < write < admin; docs/security.md)"
			if strings.Contains(text, "; the token ") {
				e.hint = "the role of the token does not allow this call: use one with the role named (read < write < admin; docs/security.md)"
			}
		case codes.Unauthenticated:
			e.hint = "give a token of the cluster (--" + flagTokenFile + " FILE, " + envToken + " or " + envTokenFile + ") with --tls-dir holding the cluster's ca.crt, or --tls-dir with a client certificate of the cluster"
			if strings.Contains(text, tlsconfig.UnknownTokenMessage) {
				e.hint = "the store's --" + contract.FlagTokensFile + " does not hold this token (from --" + flagTokenFile + ", " + envToken + " or " + envTokenFile + "): it is mistyped, revoked or was rotated; use a current token of the cluster"
			}
		case codes.Unimplemented:
			e.hint = "the server at --addr does not serve this call: is it a bellows store (not a compactor), of this version?"
		case codes.Internal, codes.Unknown, codes.DataLoss:
			if _, ok := status.FromError(err); ok {
				// A store's answer: not an error of this process's
				// own, which any error that is no gRPC status counts
				// as Unknown.
				e.hint = "the store failed; its log says why"
			}
		}
	}
	return e
}
