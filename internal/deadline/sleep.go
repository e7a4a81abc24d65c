package deadline

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx ends, whichever comes first: nil after d, ctx.Err() when
// ctx ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
