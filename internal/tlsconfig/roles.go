package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var roleNames = map[Role]string{Node: "node", Admin: "admin", Writer: "write", Reader: "read"}

func (r Role) String() string { return roleNames[r] }

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("tls: unknown role %q (want one of read, write, admin, node)", s)
}

// allows says whether holding r permits a call that needs need.
func (r Role) allows(need Role) bool {
	switch r {
	case Node:
		return true
	case Admin:
		return need != Node
	case Writer:
		return need == Writer || need == Reader
	case Reader:
		return need == Reader
	}
	return false
}

// certRole is the role the certificate leaf names, and its name.
func certRole(leaf *x509.Certificate) (Role, string, error) {
	for _, o := range leaf.Subject.Organization {
		if r, err := ParseRole(o); err == nil {
			return r, leaf.Subject.CommonName, nil
		}
	}
	return 0, leaf.Subject.CommonName, status.Errorf(codes.PermissionDenied,
		"the client certificate %q names no role (its organization must be one of read, write, admin)", leaf.Subject.CommonName)
}

// Authorize returns interceptors that refuse, with PERMISSION_DENIED naming
// both roles, a call whose method needs a role the caller's certificate
// does not hold (need maps a full method name to its role). Calls without
// TLS are not checked: a server without --tls-dir authenticates nobody.
func Authorize(need func(method string) Role) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return interceptors(authorizer{need: need}.check)
}

// AuthorizeWithTokens is Authorize for a server that also takes tokens
// (ServerWithTokens): a call that comes without a client certificate is
// authorized by the token it carries as the metadata "authorization:
// Bearer TOKEN", looked up in tokens. A call with neither, or with a token
// tokens does not hold, is refused with UNAUTHENTICATED; a token whose role
// is too small with PERMISSION_DENIED, as a certificate's. A call with a
// certificate is authorized by the certificate, whatever token it carries.
func AuthorizeWithTokens(need func(method string) Role, tokens *Tokens) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return interceptors(authorizer{need: need, tokens: tokens}.check)
}

type authorizer struct {
	need   func(method string) Role
	tokens *Tokens // nil: certificates only
}

// NoCredentialMessage is what a call without a certificate or a token is
// told (UNAUTHENTICATED) by a store that takes tokens.
const NoCredentialMessage = "the call carries neither a client certificate nor a token: " +
	"present a client certificate of the cluster (--tls-dir with tls.crt and tls.key) or a token " +
	"(--token-file, BELLOWS_TOKEN or BELLOWS_TOKEN_FILE; gRPC metadata \"authorization: Bearer TOKEN\")"

// UnknownTokenMessage is what a call with a token the store does not hold
// is told (UNAUTHENTICATED). It never repeats the token.
const UnknownTokenMessage = "the token is not known to this cluster"

func (a authorizer) check(ctx context.Context, method string) error {
	p, found := peer.FromContext(ctx)
	if !found {
		return nil
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS {
		return nil // a server without TLS authenticates nobody
	}
	want := a.need(method)
	if len(info.State.PeerCertificates) > 0 {
		role, who, err := certRole(info.State.PeerCertificates[0])
		if err != nil {
			return err
		}
		if !role.allows(want) {
			return status.Errorf(codes.PermissionDenied, "%s needs the %s role; the client certificate %q has %s", method, want, who, role)
		}
		return nil
	}
	if a.tokens == nil {
		// The handshake requires a certificate; this is a second lock.
		return status.Error(codes.Unauthenticated, "the client presented no certificate (this store takes client certificates only)")
	}
	token, err := bearer(ctx)
	if err != nil {
		return err
	}
	t, ok := a.tokens.Lookup(token)
	if !ok {
		return status.Error(codes.Unauthenticated, UnknownTokenMessage)
	}
	if !t.Role.allows(want) {
		return status.Errorf(codes.PermissionDenied, "%s needs the %s role; the token %q has %s", method, want, t.Name, t.Role)
	}
	return nil
}

// bearer is the token of the call's "authorization: Bearer TOKEN".
func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch {
	case len(vals) == 0:
		return "", status.Error(codes.Unauthenticated, NoCredentialMessage)
	case len(vals) > 1:
		return "", status.Error(codes.Unauthenticated, "the call carries more than one authorization value: send one, \"Bearer TOKEN\"")
	}
	scheme, token, found := strings.Cut(vals[0], " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, "the authorization metadata is not \"Bearer TOKEN\"")
	}
	return strings.TrimSpace(token), nil
}

func interceptors(check func(ctx context.Context, method string) error) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
	return unary, stream
}

// MethodRoles maps the methods of a service (its full name, e.g.
// "/bellows.kv.v1.KV/") to roles: those listed in reads need Reader, the
// rest of the service def.
func MethodRoles(service string, def Role, reads ...string) func(string) (Role, bool) {
	return func(method string) (Role, bool) {
		if len(method) <= len(service) || method[:len(service)] != service {
			return 0, false
		}
		if slices.Contains(reads, method[len(service):]) {
			return Reader, true
		}
		return def, true
	}
}

// DirRole is the role named by the certificate in dir ("" if none or
// unreadable).
func DirRole(dir string) string {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return ""
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return ""
	}
	for _, o := range leaf.Subject.Organization {
		if _, err := ParseRole(o); err == nil {
			return o
		}
	}
	return ""
}
