package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
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

// peerRole is the role of the certificate a call's peer presented, and
// its name; ok false without TLS.
func peerRole(ctx context.Context) (role Role, who string, ok bool, err error) {
	p, found := peer.FromContext(ctx)
	if !found {
		return 0, "", false, nil
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.PeerCertificates) == 0 {
		return 0, "", false, nil
	}
	leaf := info.State.PeerCertificates[0]
	for _, o := range leaf.Subject.Organization {
		if r, err := ParseRole(o); err == nil {
			return r, leaf.Subject.CommonName, true, nil
		}
	}
	return 0, leaf.Subject.CommonName, true, status.Errorf(codes.PermissionDenied,
		"the client certificate %q names no role (its organization must be one of read, write, admin)", leaf.Subject.CommonName)
}

// Authorize returns interceptors that refuse, with PERMISSION_DENIED naming
// both roles, a call whose method needs a role the caller's certificate
// does not hold (need maps a full method name to its role). Calls without
// TLS are not checked: a server without --tls-dir authenticates nobody.
func Authorize(need func(method string) Role) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	check := func(ctx context.Context, method string) error {
		role, who, ok, err := peerRole(ctx)
		if err != nil || !ok {
			return err
		}
		if want := need(method); !role.allows(want) {
			return status.Errorf(codes.PermissionDenied, "%s needs the %s role; the client certificate %q has %s",
				method, want, who, role)
		}
		return nil
	}
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
