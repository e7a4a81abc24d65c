package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/provider"
)

// canaryCapability is what the herd's watchers watch: a few canary instances the bench
// withdraws during the wave, not the agents' capability (a watcher of 50,000 instances
// measures answer size, not whether the registry keeps answering).
const canaryCapability = "herd.canary"

// watchPanel is the herd's watchers: each keeps a delta watch on the canaries through the
// discovery client, and the panel counts, per canary, how many watchers' views hold it.
type watchPanel struct {
	n       int
	mu      sync.Mutex
	holders map[string]int // canary -> watchers holding it
	// the withdrawal being timed: the canary, and a channel closed when no watcher holds it
	target string
	gone   chan struct{}
}

func newWatchPanel(n int) *watchPanel { return &watchPanel{n: n, holders: map[string]int{}} }

// run starts the watchers on url until ctx ends; wg owns them.
func (p *watchPanel) run(ctx context.Context, wg *sync.WaitGroup, url string) error {
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: p.n + 64, MaxIdleConnsPerHost: p.n + 64, IdleConnTimeout: time.Minute}}
	for range p.n {
		c, err := discovery.New(discovery.Config{Registries: []string{url}, Client: hc, Consumer: "herd-watcher"})
		if err != nil {
			return fmt.Errorf("herd: watcher: %w", err)
		}
		held := map[string]bool{}
		wg.Go(func() {
			c.Watch(ctx, discovery.Query{CapabilityID: canaryCapability}, func(r *discovery.Result) {
				now := map[string]bool{}
				for _, e := range r.Entries {
					now[e.InstanceID] = true
				}
				p.update(held, now)
				held = now
			})
		})
	}
	return nil
}

// update moves one watcher's view from before to after.
func (p *watchPanel) update(before, after map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range before {
		if !after[id] {
			p.holders[id]--
			if id == p.target && p.holders[id] == 0 && p.gone != nil {
				close(p.gone)
				p.gone = nil
			}
		}
	}
	for id := range after {
		if !before[id] {
			p.holders[id]++
		}
	}
}

// heldByAll returns the canaries every watcher holds, in order.
func (p *watchPanel) heldByAll() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, n := range p.holders {
		if n == p.n {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// watch makes id the withdrawal being timed: the channel closes when no watcher holds it.
func (p *watchPanel) watch(id string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target, p.gone = id, make(chan struct{})
	if p.holders[id] == 0 {
		close(p.gone)
		p.gone = nil
		return closed
	}
	return p.gone
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// withdrawals deregisters, every interval until ctx ends, a canary every watcher holds, and
// times until no watcher holds it: a withdrawal in the middle of the re-registration wave.
// A canary's agent registers it again at its next heartbeat (404), so the canaries take
// turns: one is withdrawn only once every watcher holds it again. It returns each withdrawal's time, and how many were not seen by every watcher
// within limit.
func withdrawals(ctx context.Context, p *watchPanel, canaries map[string]*provider.Agent, c *client.Client, interval, limit time.Duration) (times []time.Duration, missed int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return times, missed
		case <-t.C:
		}
		held := p.heldByAll()
		if len(held) == 0 {
			continue // none is back in every watcher's view yet
		}
		id := held[rand.IntN(len(held))]
		a := canaries[id]
		if a == nil {
			continue
		}
		st := a.Status()
		if !st.Registered {
			continue
		}
		gone := p.watch(id)
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, limit)
		err := c.Deregister(dctx, id, st.Generation)
		cancel()
		if err != nil {
			continue // shed, or the agent registered anew meanwhile: not a withdrawal
		}
		select {
		case <-gone:
			times = append(times, time.Since(start))
		case <-time.After(limit):
			missed++
		case <-ctx.Done():
			return times, missed
		}
	}
}

// canaryRegistration is the registration of canary i.
func canaryRegistration(i int) apiv1.RegisterRequest {
	return apiv1.RegisterRequest{InstanceID: fmt.Sprintf("canary-%d", i), ServiceName: "herd-canary", ServiceVersion: "1.0.0",
		Endpoint:     fmt.Sprintf("http://127.0.0.1:%d", 19000+i),
		Capabilities: []apiv1.Capability{{CapabilityID: canaryCapability, CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "herd"}}}
}
