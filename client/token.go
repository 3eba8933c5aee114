package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithToken is the dial option that sends token with every call as the
// gRPC metadata "authorization: Bearer TOKEN", the way a store that runs
// with --tokens-file authenticates a client without a certificate
// (docs/security.md). It requires transport security: gRPC refuses to send
// it over a plaintext connection. Options.Token adds it to a Client; use it
// directly on connections of your own (the Admin API).
func WithToken(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearerToken(token))
}

// bearerToken is a token as per-RPC credentials.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity: a token is never sent in plaintext.
func (bearerToken) RequireTransportSecurity() bool { return true }

var _ credentials.PerRPCCredentials = bearerToken("")
