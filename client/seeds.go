package client

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Why New gives up on a seed at once, without retrying: the seed answers,
// but not as a Bellows store this client can talk to, and asking again
// does not change that. New returns them wrapped in a *SeedError, which
// names the seed and says what is on the other side; test with errors.Is.
var (
	// ErrTLSMismatch: the seed speaks TLS and the client dials it in
	// plaintext (no credentials given: Options.FindCredentials, or
	// WithTLSDir), or the seed speaks plaintext and the client dials it
	// with TLS.
	ErrTLSMismatch = errors.New("bellows client: TLS mismatch")
	// ErrNotAStore: the seed is another server: a compaction worker (gRPC
	// without the store's API), a metrics port (HTTP), or anything else.
	ErrNotAStore = errors.New("bellows client: not a Bellows store")
)

// SeedError is why a seed could not be used.
type SeedError struct {
	// Addr is the seed.
	Addr string
	// Kind is ErrTLSMismatch or ErrNotAStore.
	Kind error
	// What says what answered, for a person: "speaks TLS, and the client
	// dials it in plaintext".
	What string
	// Hint says what to do about it.
	Hint string
	// Err is the call's own error (gRPC's).
	Err error
}

func (e *SeedError) Error() string   { return e.Addr + " " + e.What + ": " + e.Hint }
func (e *SeedError) Unwrap() []error { return []error{e.Kind, e.Err} }

// probeTimeout bounds each look at what a seed speaks.
const probeTimeout = 2 * time.Second

// identify says why addr, whose Regions call failed with err, is no store
// this client can talk to, or nil when retrying may mend the failure (a
// store restarting, overloaded, or refusing who the client is). It reads
// gRPC's error and, when that is ambiguous (a connection closed before the
// server's HTTP/2 preface: a TLS server read the client's plaintext, or
// a store stopped), asks the seed itself whether it speaks TLS.
func identify(addr string, err error) *SeedError {
	text := status.Convert(err).Message()
	seed := func(kind error, what, hint string) *SeedError {
		return &SeedError{Addr: addr, Kind: kind, What: what, Hint: hint, Err: err}
	}
	const notAStore = "give the address of a store's gRPC port (bellows local prints it as the store's grpc=) or of the cluster's client Service"
	switch {
	case status.Code(err) == codes.Unimplemented:
		return seed(ErrNotAStore, fmt.Sprintf("speaks gRPC but not the Bellows store API (%s): is it a compaction worker?", text), notAStore)
	case strings.Contains(text, "missing selected ALPN property"), strings.Contains(text, "tls: no application protocol"):
		return seed(ErrNotAStore, "speaks TLS but not gRPC: an HTTPS server (a metrics port?), not a Bellows store", notAStore)
	case strings.Contains(text, "looked like an HTTP/1.1 header"):
		return seed(ErrNotAStore, "is an HTTP server (a metrics port?), not a Bellows store: it answered in HTTP/1.1, not gRPC", notAStore)
	case strings.Contains(text, "first record does not look like a TLS handshake"):
		if speaksHTTP(addr) {
			return seed(ErrNotAStore, "is a plaintext HTTP server (a metrics port?), not a Bellows store", notAStore)
		}
		return seed(ErrTLSMismatch, "does not speak TLS, and the client dials it with TLS",
			"the cluster is plaintext (bellows local --tls=false): dial it without TLS credentials")
	case strings.Contains(text, "error reading server preface"), strings.Contains(text, "connection closed before server preface received"):
		switch speaks, proto := speaksTLS(addr); {
		case !speaks:
			return nil
		case proto == "":
			// A server that refused a handshake without a client
			// certificate: whether this client dialled in plaintext or
			// with TLS and no certificate (a token), it needs one.
			return seed(ErrTLSMismatch, "speaks TLS and requires a client certificate, which the client did not present (it dials in plaintext, or with TLS and no certificate)",
				"give the cluster's credentials with a client certificate: Options.FindCredentials finds bellows local's and the client configuration's, or DialOptions with WithTLSDir; a token alone is taken only by a store with --tokens-file")
		case proto == "h2":
			return seed(ErrTLSMismatch, "speaks TLS, and the client dials it in plaintext",
				"give the cluster's credentials: Options.FindCredentials finds bellows local's and the client configuration's, or DialOptions with WithTLSDir")
		default:
			return seed(ErrNotAStore, "speaks TLS but not gRPC: an HTTPS server (a metrics port?), not a Bellows store", notAStore)
		}
	}
	return nil
}

// speaksTLS reports whether addr answers a TLS handshake, and the
// application protocol it chose ("h2" for gRPC; "" when the handshake
// failed on a TLS alert, as a server wanting a certificate may send).
func speaksTLS(addr string) (bool, string) {
	d := &net.Dialer{Timeout: probeTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // only asks what it speaks
	if err == nil {
		defer conn.Close()
		// TLS 1.3 finishes the client's side of the handshake before the
		// server checks the client's certificate: a server that wants one
		// says so on the first read; one that does not sends its HTTP/2
		// settings, or nothing.
		_ = conn.SetReadDeadline(time.Now().Add(probeTimeout))
		if _, rerr := conn.Read(make([]byte, 1)); rerr != nil {
			var alert tls.AlertError
			if errors.As(rerr, &alert) || strings.Contains(rerr.Error(), "certificate required") || strings.Contains(rerr.Error(), "bad certificate") {
				return true, ""
			}
		}
		return true, conn.ConnectionState().NegotiatedProtocol
	}
	var rec tls.RecordHeaderError
	var alert tls.AlertError
	var netErr net.Error
	switch {
	case errors.As(err, &alert):
		return true, ""
	case errors.As(err, &rec), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.As(err, &netErr):
		return false, ""
	}
	return strings.Contains(err.Error(), "remote error: tls:"), ""
}

// speaksHTTP reports whether addr answers a plaintext HTTP/1.0 request
// with an HTTP response (a gRPC server closes the connection instead).
func speaksHTTP(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return false
	}
	head := make([]byte, 5)
	n, _ := io.ReadFull(conn, head)
	return bytes.Equal(head[:n], []byte("HTTP/"))
}

// refused reports whether err is a connection the seed's host refused:
// nothing listens at that port.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(status.Convert(err).Message(), "connect: connection refused")
}

// seedFailure is one store's failure to answer a refresh, as a person
// reads it: the address and the reason, without gRPC's wrapping.
type seedFailure struct {
	addr string
	err  error
}

func (f *seedFailure) Error() string {
	if refused(f.err) {
		return f.addr + ": connection refused (nothing listens there)"
	}
	st, ok := status.FromError(f.err)
	if !ok {
		return f.addr + ": " + f.err.Error()
	}
	msg := st.Message()
	msg = strings.TrimPrefix(msg, "connection error: desc = ")
	if len(msg) > 1 && msg[0] == '"' && msg[len(msg)-1] == '"' {
		msg = msg[1 : len(msg)-1]
	}
	msg = strings.TrimPrefix(msg, "transport: ")
	return fmt.Sprintf("%s: %s (%s)", f.addr, msg, st.Code())
}

func (f *seedFailure) Unwrap() error { return f.err }
