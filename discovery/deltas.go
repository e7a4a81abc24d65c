package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
)

// Delta is one answer of WatchDeltas: what changed in the registry's answer to the watched
// query since the previous Delta. The consumer keeps its own copy of the answer: with Reset
// it replaces its copy by Entries — or, while the registry warms up (Complete false), merges
// Entries into it, keeping its entries of the instances Entries does not hold unless Gone
// names them; otherwise it drops the entries of each instance of Gone at or below the
// generation named and puts Put in place (by instance_id, capability_id, provider,
// capability_version).
type Delta struct {
	Epoch    string
	Revision int64
	Complete bool
	Reset    bool
	Entries  []apiv1.CapabilityEntry
	Put      []apiv1.CapabilityEntry
	Gone     []apiv1.Removal
}

// Keeper is a consumer's own copy of an answer, kept from Deltas (Delta.Apply), its entries
// by (instance_id, capability_id, provider, capability_version).
type Keeper interface {
	// Len is how many entries it holds.
	Len() int
	// Reset makes it hold entries alone.
	Reset(entries []apiv1.CapabilityEntry)
	// Drop removes the entries of instance id at or below generation.
	Drop(id string, generation int64)
	// Put puts e in place of the entry of its key.
	Put(e apiv1.CapabilityEntry)
}

// Apply folds d into k by the rule Delta states: a Reset of a complete answer (or into an
// empty copy) replaces it; a Reset while the registry warms up replaces the entries of the
// instances it answers and keeps the others; otherwise the instances of Gone are dropped at
// or below their generations and Put is put in place.
func (d *Delta) Apply(k Keeper) {
	if d.Reset && (d.Complete || k.Len() == 0) {
		k.Reset(d.Entries)
		return
	}
	for _, g := range d.Gone {
		k.Drop(g.InstanceID, g.Generation)
	}
	put := d.Put
	if d.Reset {
		answered := make(map[string]bool, len(d.Entries))
		for i := range d.Entries {
			if id := d.Entries[i].InstanceID; !answered[id] {
				answered[id] = true
				k.Drop(id, math.MaxInt64)
			}
		}
		put = d.Entries
	}
	for i := range put {
		k.Put(put[i])
	}
}

// WatchDeltas watches q as Watch does, with delta watches, but keeps no view: it hands fn
// (from its own goroutine, one call at a time) each change, so that a consumer of a large
// view (an xDS server watching the whole fleet) pays for what changed, not for the view, at
// every change. The first answer, one of another epoch, one the registry could not tell the
// changes of, and the first complete answer after the registry's warm-up are Reset; against a
// registry without delta watches every answer is. Failures are retried with jittered backoff
// until ctx ends; fn then keeps what it had, and DeltaState says how old it is.
func (c *Client) WatchDeltas(ctx context.Context, q Query, fn func(*Delta)) error {
	vals := q.values()
	key := vals.Encode()
	c.mu.Lock()
	st := c.deltas[key]
	if st == nil {
		st = &deltaState{}
		c.deltas[key] = st
	}
	c.mu.Unlock()
	heard := func(err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		st.lastErr = err
		if err == nil {
			st.heard, st.heardAt = true, c.cfg.Now()
		}
	}
	var (
		held, off, complete bool
		epoch               string
		revision            int64
		failures            int
	)
	for ctx.Err() == nil {
		var d *Delta
		var err error
		switch {
		case off:
			at := position{index: -1}
			if held {
				at = position{epoch: epoch, index: revision}
			}
			var a answer[[]apiv1.CapabilityEntry]
			if a, err = c.fetchCapabilities(ctx, vals, at); err == nil {
				d = &Delta{Epoch: a.epoch, Revision: a.revision, Complete: a.complete, Reset: true, Entries: a.body, Gone: removals(a.removed)}
			}
		default:
			p := c.poll(position{epoch: epoch, index: revision})
			if !held {
				p = client.Poll{}
			}
			var resp *apiv1.DiscoveryDelta
			resp, err = c.client.CapabilitiesDelta(ctx, vals, p)
			var ae *apiv1.Error
			if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && ae.Code == apiv1.CodeUnknownParameter {
				off = true
				c.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "the registry has no delta watch: watching whole answers", slog.Any("error", err))
				continue
			}
			if err == nil {
				switch {
				case resp.RegistryEpoch == "" || resp.Reset && resp.Capabilities == nil:
					err = errors.New("delta answer without registry_epoch, or a reset without capabilities")
				case !resp.Reset && resp.RegistryEpoch != epoch:
					err = fmt.Errorf("delta of epoch %s on an answer of epoch %s", resp.RegistryEpoch, epoch)
				case !resp.Reset && resp.Complete && !complete:
					// the warm-up is over: the consumer's merged copy is replaced by the whole answer
					held = false
					continue
				default:
					d = &Delta{Epoch: resp.RegistryEpoch, Revision: resp.Revision, Complete: resp.Complete, Reset: resp.Reset,
						Entries: resp.Capabilities, Put: append(resp.Added, resp.Updated...), Gone: resp.Removed}
					c.metrics.deltas.WithLabelValues(deltaKind(resp)).Inc()
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			heard(err)
			failures++
			c.backOff(ctx, "discovery delta watch failed", err, failures)
			continue
		}
		heard(nil)
		failures = 0
		moved := !held || d.Reset || d.Revision != revision || len(d.Put)+len(d.Gone) > 0
		held, epoch, revision, complete = true, d.Epoch, d.Revision, d.Complete
		if moved && fn != nil {
			fn(d)
		}
	}
	return nil
}

// DeltaState returns the state and age of what a WatchDeltas of q handed its consumer, by
// the rules of the client's views: uninitialized until its first answer; fresh while its
// polls succeed; stale (last-known-good) once one failed, until StaleAllowance has passed
// since the last answer; expired after that. Age is the time since the last answer heard.
func (c *Client) DeltaState(q Query) (State, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.deltas[q.values().Encode()]
	if st == nil || !st.heard {
		return StateUninitialized, 0
	}
	age := c.cfg.Now().Sub(st.heardAt)
	switch {
	case st.lastErr != nil && age > c.cfg.StaleAllowance:
		return StateExpired, age
	case st.lastErr != nil:
		return StateStale, age
	}
	return StateFresh, age
}

// deltaState is how a WatchDeltas last fared: when it last heard an answer, and the error of
// its last attempt (nil: it succeeded).
type deltaState struct {
	heard   bool
	heardAt time.Time
	lastErr error
}

// removals lists a removed set.
func removals(m map[string]bool) []apiv1.Removal {
	out := make([]apiv1.Removal, 0, len(m))
	for id := range m {
		out = append(out, apiv1.Removal{InstanceID: id, Generation: math.MaxInt64})
	}
	return out
}
