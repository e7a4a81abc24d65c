package auth

import (
	"crypto/tls"
	"net/http"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Guard authorises the protected endpoints of the gateway and the orchestrator with the
// registry's means: a caller is identified by its client certificate or bearer token, and the
// RBAC file in force says what it may do.
type Guard struct {
	authn  *Authenticator
	policy *PolicyFile
}

// NewGuard returns a guard that identifies callers with authn and authorises them with
// policy; both are required.
func NewGuard(authn *Authenticator, policy *PolicyFile) *Guard {
	return &Guard{authn: authn, policy: policy}
}

// Authorize returns the caller's identity when it may do perm (WorkflowsRead,
// WorkflowsWrite, WorkflowsRun, GatewayAdmin); otherwise a 401 *apiv1.Error (no acceptable
// credential) or a 403 one (an identity without that permission).
func (g *Guard) Authorize(r *http.Request, perm string) (string, error) {
	return g.AuthorizeConn(r.TLS, r.Header.Get("Authorization"), perm)
}

// AuthorizeConn is Authorize from a connection's TLS state and Authorization value (a gRPC
// stream's peer and metadata).
func (g *Guard) AuthorizeConn(state *tls.ConnectionState, authorization, perm string) (string, error) {
	identity, err := g.authn.IdentifyConn(state, authorization)
	if err != nil {
		return "", apiv1.Errorf(http.StatusUnauthorized, apiv1.CodeUnauthenticated, "%v", err)
	}
	if !g.policy.Allows(identity, perm) {
		return identity, apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "identity %q may not do this: it needs a role granting %s (or admin)", identity, perm)
	}
	return identity, nil
}
