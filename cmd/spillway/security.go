package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/spillway/spillway/security/audit"
	"github.com/spillway/spillway/security/authn"
	"github.com/spillway/spillway/security/authz"
)

// authentication is the identity of every gRPC call and HTTP request:
// the verified client certificate, else a bearer token of --tokens-file
// or --admin-token-file (identity admin), else anonymous.
type authentication struct {
	*authn.Authenticator
	tokens *authn.TokenFile
}

func (a authentication) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	}
}

// startSecurity loads --tokens-file and --authz-file (a bad one fails
// the start); their Run methods keep them fresh.
//
// Policy reloads and every refusal go to the audit log.
func startSecurity(cfg Config, adminToken string, auditLog *audit.Log, metrics prometheus.Registerer, log *slog.Logger) (authentication, *authz.Reloader, error) {
	tokens, err := authn.OpenTokens(authn.TokensConfig{
		Path: cfg.TokensFile, AdminToken: adminToken,
		Logger: log.With("component", "authn"), Registerer: metrics,
	})
	if err != nil {
		return authentication{}, nil, fmt.Errorf("--tokens-file (tokens_file): %w", err)
	}
	policy, err := authz.NewReloader(authz.ReloaderConfig{
		Path:   cfg.AuthzFile,
		Logger: log.With("component", "authz"), Registerer: metrics,
		OnReload: func(old, new string) {
			auditLog.PolicyReloaded(context.Background(), cfg.AuthzFile, old, new, nil)
		},
		OnDeny: func(ctx context.Context, d *authz.Denied) {
			auditLog.DeniedError(ctx, d.Action, d.Resource, d)
		},
	})
	if err != nil {
		return authentication{}, nil, fmt.Errorf("--authz-file (authz_file): %w", err)
	}
	log.Info("security", "tokens", tokens.Set().Len(), "policy", policy.Policy().Source())
	return authentication{authn.NewAuthenticator(tokens, log.With("component", "authn")), tokens}, policy, nil
}
