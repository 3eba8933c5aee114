package store

import (
	"context"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/bellows-kv/bellows/internal/contract"
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

// authentication is how the store's gRPC server knows its clients: with
// --tls-dir, mutual TLS, every call checked against methodRole; with
// --tokens-file too, a client may connect without a certificate and
// present a token instead (docs/security.md, section 3). Without
// --tls-dir, nobody is authenticated.
func authentication(cfg Config, log *slog.Logger) ([]grpc.ServerOption, grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor, error) {
	switch {
	case cfg.TLSDir == "" && cfg.TokensFile != "":
		return nil, nil, nil, fmt.Errorf("--%s: tokens are accepted over TLS only: give --%s too", contract.FlagTokensFile, contract.FlagTLSDir)
	case cfg.TLSDir == "":
		return nil, passUnary, passStream, nil
	case cfg.TokensFile == "":
		opt, err := tlsconfig.Server(cfg.TLSDir)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
		}
		unary, stream := tlsconfig.Authorize(methodRole)
		return []grpc.ServerOption{opt}, unary, stream, nil
	}
	tokens, err := tlsconfig.LoadTokens(cfg.TokensFile, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--%s: %w", contract.FlagTokensFile, err)
	}
	opt, err := tlsconfig.ServerWithTokens(cfg.TLSDir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--%s: %w", contract.FlagTLSDir, err)
	}
	log.Info("clients may authenticate with a certificate or a token", "tokens-file", cfg.TokensFile, "tokens", tokens.Len())
	unary, stream := tlsconfig.AuthorizeWithTokens(methodRole, tokens)
	return []grpc.ServerOption{opt}, unary, stream, nil
}

// passUnary and passStream check nothing: a store without TLS
// authenticates nobody.
func passUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(ctx, req)
}

func passStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, ss)
}
