package gateway

import (
	"context"
	"io"
)

// Decline lets a caller take a request elsewhere when the gateway could not send it to any
// upstream: every upstream it tried refused the connection, nothing was sent, and the body
// can be sent again. The gateway then answers nothing and sets Declined. A regional router
// (internal/region) uses it to send the request to another region.
type Decline struct {
	Declined bool
	// Body returns the request's body again (nil: it had none).
	Body func() (io.ReadCloser, error)
	// Err is why the last upstream failed.
	Err error
}

type declineKey struct{}

// WithDecline returns ctx carrying a Decline the gateway fills when it declines a request
// served with it.
func WithDecline(ctx context.Context) (context.Context, *Decline) {
	d := &Decline{}
	return context.WithValue(ctx, declineKey{}, d), d
}

// DeclineFrom is the Decline ctx carries, or nil.
func DeclineFrom(ctx context.Context) *Decline {
	d, _ := ctx.Value(declineKey{}).(*Decline)
	return d
}

// WithoutDecline returns ctx with no Decline: the gateway answers whatever happens.
func WithoutDecline(ctx context.Context) context.Context {
	return context.WithValue(ctx, declineKey{}, (*Decline)(nil))
}
