package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/auth"
	"github.com/meshflows/meshflows/internal/registry"
)

// Authenticator says who sent a request; an error means no acceptable credential (401).
type Authenticator interface {
	Identify(r *http.Request) (string, error)
}

// Policy says what an identity may do. CanRegister returns nil or a 403 *apiv1.Error
// naming every offending field.
type Policy interface {
	CanRegister(identity string, req *apiv1.RegisterRequest) error
	CanDiscover(identity string) bool
	IsAdmin(identity string) bool
	IsGateway(identity string) bool
	// HasRoles reports whether the policy gives identity any role: one with none may
	// register, heartbeat or deregister nothing, and is told so before any instance is looked
	// up (whether an instance exists is not for it to learn).
	HasRoles(identity string) bool
}

// Limiter rate-limits registrations per identity; a refusal says how long to wait.
type Limiter interface {
	Allow(identity string) (bool, time.Duration)
}

// Auditor records one line per audited request. It must not drop lines.
type Auditor interface {
	Record(e auth.AuditEntry) error
}

// access is what a route requires of its caller.
type access int

const (
	open     access = iota // health and metrics: no credential
	provider               // register, heartbeat, deregister: any identity; ownership and the policy are checked by the handler and the registry
	discover               // discovery and the catalog: a role that may discover
	gateway                // passive outcomes and drain acknowledgements: a gateway role
	admin                  // admin endpoints
)

// requestInfo is filled in by handlers for the audit line.
type requestInfo struct {
	instanceID string
}

type infoKey struct{}

func noteInstance(ctx context.Context, id string) {
	if ri, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		ri.instanceID = id
	}
}

// guard authenticates and authorises a request for a route that requires acc, and audits
// it. It returns the request to serve, or false when it has answered already.
func (s *Server) guard(w http.ResponseWriter, r *http.Request, acc access) (*http.Request, bool) {
	if s.cfg.Authenticator == nil || acc == open {
		return r, true
	}
	identity, err := s.cfg.Authenticator.Identify(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshflows"`)
		s.writeError(w, r, apiv1.Errorf(http.StatusUnauthorized, apiv1.CodeUnauthenticated, "%v", err))
		return nil, false
	}
	isAdmin := s.cfg.Policy.IsAdmin(identity) // Validate made sure a policy goes with an authenticator
	var denied string
	switch {
	case acc == discover && !s.cfg.Policy.CanDiscover(identity):
		denied = "identity %q has no role that may discover"
	case acc == gateway && !s.cfg.Policy.IsGateway(identity):
		denied = "identity %q has no gateway role: only gateways report outcomes and acknowledge tables"
	case acc == admin && !isAdmin:
		denied = "identity %q is not an admin"
	case acc == provider && !s.cfg.Policy.HasRoles(identity):
		denied = "identity %q has no roles"
	}
	if denied != "" {
		s.writeError(w, r, apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, denied, identity))
		return nil, false
	}
	return r.WithContext(registry.WithCaller(r.Context(), registry.Caller{Identity: identity, Admin: isAdmin})), true
}

// audited wraps h so that every request through it leaves one audit line.
func (s *Server) audited(h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Audit == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{instanceID: r.PathValue("instance_id")}
		sw := &httpapi.StatusWriter{ResponseWriter: w}
		h(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		identity := registry.CallerFrom(r.Context()).Identity
		if identity == "" && s.cfg.Authenticator != nil {
			identity, _ = s.cfg.Authenticator.Identify(r) // refused requests are audited with whoever they claimed to be
		}
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		if err := s.cfg.Audit.Record(auth.AuditEntry{Time: start, Identity: identity, Method: r.Method, Path: r.URL.Path,
			InstanceID: info.instanceID, Status: sw.Status, Latency: time.Since(start), Remote: host}); err != nil {
			s.cfg.Logger.Error("audit log write failed", "error", err)
		}
	}
}

// retryAfter is the Retry-After of err, when it says how long to wait.
func retryAfter(err error) (string, bool) {
	var ae *apiv1.Error
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return strconv.Itoa(ae.RetryAfter), true
	}
	var wu *registry.WarmingUpError
	if errors.As(err, &wu) {
		return strconv.Itoa(max(1, int((wu.Left+time.Second-1)/time.Second))), true
	}
	return "", false
}
