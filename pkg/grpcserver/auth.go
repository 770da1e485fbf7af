package grpcserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
)

// Policy lists, per full method name ("/switchyard.registry.v1.RegistryService/Register"),
// the roles that may call it. Admin may call every method; a method missing
// from the table is admin only, so that a new RPC is closed until someone
// decides who may call it. The health service is open to everyone.
type Policy map[string][]authtoken.Role

// Roles returns the roles allowed to call method, admin included.
func (p Policy) Roles(method string) []authtoken.Role {
	return append(slices.Clone(p[method]), authtoken.RoleAdmin)
}

// healthPrefix is the health service, which load balancers and probes call
// without credentials.
const healthPrefix = "/grpc.health.v1.Health/"

// reflectionPrefix matches both reflection service versions.
const reflectionPrefix = "/grpc.reflection."

type callerKey struct{}

// Caller is the identity of an authenticated call.
type Caller struct {
	// Roles are the roles of the caller's token.
	Roles []authtoken.Role
	// Namespaces, when not nil, are the only namespaces the call may
	// register or publish in: the token's grants that let the call through
	// were all limited to namespaces (token file "namespace=").
	Namespaces []string
	// key identifies the token for per-client limits without holding it.
	key string
}

// CheckNamespace returns PermissionDenied when the caller's token is limited
// to namespaces and ns is not one of them; nil for callers that are not
// limited and on servers without tokens. Services call it before any change
// in a namespace (registering an instance or a model, publishing).
func CheckNamespace(ctx context.Context, ns string) error {
	return NamespaceChecker(ctx)(ns)
}

// NamespaceChecker returns CheckNamespace for the caller of ctx, read from
// ctx once: a stream that checks every message it receives looks its caller
// up once instead of walking the context's chain of values each time.
func NamespaceChecker(ctx context.Context) func(ns string) error {
	c, ok := CallerFrom(ctx)
	if !ok || c.Namespaces == nil {
		return func(string) error { return nil }
	}
	return func(ns string) error {
		if slices.Contains(c.Namespaces, ns) {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "this token may register and publish only in namespace(s) %s, not %q",
			strings.Join(c.Namespaces, ", "), ns)
	}
}

// CallerFrom returns the caller of an authenticated call; ok is false when
// the server runs without tokens.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// authorizer checks each call's bearer token against the token file and the
// service's policy.
type authorizer struct {
	tokens *authtoken.Set
	policy Policy
}

var (
	errNoToken  = status.Error(codes.Unauthenticated, "this server requires a bearer token: send \"authorization: Bearer <token>\" (clients: --auth-token or SWITCHYARD_AUTH_TOKEN)")
	errBadToken = status.Error(codes.Unauthenticated, "the bearer token is not one this server accepts")
)

// authorize returns the context of an allowed call, or the status that ends
// it: Unauthenticated without a known token, PermissionDenied when the
// token's roles may not call method.
func (a *authorizer) authorize(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, healthPrefix) {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(authtoken.MetadataKey)
	if len(vals) == 0 {
		return nil, errNoToken
	}
	tok, ok := authtoken.FromHeader(vals[0])
	if !ok {
		return nil, errBadToken
	}
	grants := a.tokens.Grants(tok)
	if len(grants) == 0 {
		return nil, errBadToken
	}
	roles := a.tokens.Roles(tok)
	allowed := a.policy.Roles(method)
	if strings.HasPrefix(method, reflectionPrefix) {
		allowed = authtoken.Roles // any authenticated caller may read the schema
	}
	// The call's namespaces are those of the grants that allow it; one
	// grant without a limit (admin never has one) lifts the limit.
	var through bool
	var namespaces []string
	unlimited := false
	for _, g := range grants {
		if !slices.Contains(allowed, g.Role) {
			continue
		}
		through = true
		if g.Namespaces == nil {
			unlimited = true
		}
		namespaces = append(namespaces, g.Namespaces...)
	}
	if through {
		if unlimited {
			namespaces = nil
		}
		return context.WithValue(ctx, callerKey{}, Caller{Roles: roles, Namespaces: namespaces, key: "token:" + authtoken.Hash(tok)}), nil
	}
	return nil, status.Errorf(codes.PermissionDenied, "%s may be called by %s; this token's roles are %s", method, roleList(allowed), roleList(roles))
}

func roleList(rs []authtoken.Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

func (a *authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.authorize(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := a.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// ErrNoAuth is returned by New with --require-auth when the server would
// accept calls from anyone: neither tokens nor mutual TLS.
var ErrNoAuth = errors.New("--require-auth: the server has neither --auth-token-file nor mutual TLS (--tls-cert, --tls-key and --tls-ca)")

// checkExposure logs a warning, or with RequireAuth returns ErrNoAuth, when
// the server authenticates nobody; the warning only beyond loopback, where
// someone else can reach it.
func checkExposure(cfg Config, tokens int, log *slog.Logger) error {
	mutual := cfg.TLS.Enabled() && cfg.TLS.CAFile != ""
	if tokens > 0 || mutual {
		return nil
	}
	if cfg.RequireAuth {
		return ErrNoAuth
	}
	if !IsLoopback(cfg.GRPCAddr) {
		log.Warn("gRPC server listens beyond loopback and authenticates nobody: anyone who reaches it can register, deregister and publish; "+
			"set --auth-token-file and/or mutual TLS (--tls-cert, --tls-key, --tls-ca), or --require-auth to refuse to start like this",
			"addr", cfg.GRPCAddr, "tls", cfg.TLS.Enabled())
	}
	return nil
}

// IsLoopback reports whether a listen address binds only loopback: a
// loopback IP or "localhost". An empty host (all interfaces) or any other
// name is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// metricsListenAddr is the metrics address with the gRPC address's host when
// it names only a port (":9101"), so that a server bound to loopback does not
// publish its metrics on every interface.
func metricsListenAddr(metrics, grpcAddr string) string {
	if metrics == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(metrics)
	if err != nil || host != "" {
		return metrics
	}
	ghost, _, err := net.SplitHostPort(grpcAddr)
	if err != nil || ghost == "" {
		return metrics
	}
	return net.JoinHostPort(ghost, port)
}

func loadTokens(path string) (*authtoken.Set, error) {
	if path == "" {
		return nil, nil
	}
	s, err := authtoken.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	return s, nil
}
