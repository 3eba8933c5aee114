package store

import (
	"context"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/tlsconfig"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// storeRoles say what role each call of the store's API needs
// (docs/security.md, section 3): reads, and what a read does to finish a
// transaction its client abandoned (ResolveLocks, CheckTxnStatus), need
// read; the other KV calls write; the Admin API admin. A peer store's node
// certificate passes every check: it forwards calls a client was already
// allowed.
var storeRoles = []func(string) (tlsconfig.Role, bool){
	tlsconfig.MethodRoles("/"+kvpb.KV_ServiceDesc.ServiceName+"/", tlsconfig.Writer,
		"Get", "Scan", "BatchGet", "Regions", "BeginTxn", "TxnGet", "TxnScan", "RollbackTxn", "ResolveLocks", "CheckTxnStatus", "Clock"),
	tlsconfig.MethodRoles("/"+kvpb.Admin_ServiceDesc.ServiceName+"/", tlsconfig.Admin),
}

// methodRole is the role a call of full method name m needs: node for any
// method the store does not list.
func methodRole(m string) tlsconfig.Role {
	for _, f := range storeRoles {
		if r, ok := f(m); ok {
			return r
		}
	}
	return tlsconfig.Node
}

// passUnary and passStream check nothing: a store without TLS
// authenticates nobody.
func passUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

func passStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, ss)
}
