package registry

import (
	"context"
	"fmt"
)

// Caller is the authenticated identity behind a request. The zero Caller is the anonymous
// caller of a registry running open (--insecure): ownership is not checked for it.
type Caller struct {
	Identity string
	// Admin callers may deregister any instance.
	Admin bool
}

type callerKey struct{}

// WithCaller returns a context carrying the caller of a request.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller a context carries (the zero Caller when none).
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// mayTouch checks that the caller may act on the current record of id: its owner, or an
// admin when admin is allowed. Open mode (no identity) and unknown instances pass: the
// store answers those.
func (r *Registry) mayTouch(ctx context.Context, id string, adminAllowed bool) error {
	c := CallerFrom(ctx)
	if c.Identity == "" {
		return nil
	}
	rec, ok := r.store.Get(id)
	if !ok || rec.Owner == "" || rec.Owner == c.Identity || (adminAllowed && c.Admin) {
		return nil
	}
	return fmt.Errorf("instance %q belongs to identity %q, not %q: %w", id, rec.Owner, c.Identity, ErrForbidden)
}
