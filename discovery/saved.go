package discovery

import (
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Saved is the capability views a Client holds, as a consumer keeps them on disk across its
// own restarts: one entry per query, by its canonical parameters. (The routes view has
// RestoreRoutes; the gateway saves it itself.)
type Saved struct {
	SavedAt      time.Time            `json:"saved_at"`
	Capabilities map[string]SavedCaps `json:"capabilities"`
}

// SavedCaps is one capability query's last-known-good answer.
type SavedCaps struct {
	RegistryEpoch string                  `json:"registry_epoch"`
	Revision      int64                   `json:"revision"`
	Complete      bool                    `json:"complete"`
	Entries       []apiv1.CapabilityEntry `json:"entries"`
}

// Save returns the last-known-good answer of every capability query the client holds.
func (c *Client) Save() Saved {
	c.mu.Lock()
	views := make(map[string]*view[[]apiv1.CapabilityEntry], len(c.caps))
	for k, v := range c.caps {
		views[k] = v
	}
	c.mu.Unlock()
	out := Saved{SavedAt: c.cfg.Now().UTC(), Capabilities: make(map[string]SavedCaps, len(views))}
	for k, v := range views {
		v.mu.Lock()
		if a := v.lkg; a != nil {
			out.Capabilities[k] = SavedCaps{RegistryEpoch: a.epoch, Revision: a.revision, Complete: a.complete, Entries: a.body}
		}
		v.mu.Unlock()
	}
	return out
}

// Restore seeds the capability views that hold nothing yet with answers saved earlier (a
// consumer restarted while the registry is away). Each serves as the last-known-good view —
// stale, its age counted from the save, expired past the stale allowance — until the
// registry answers; incomplete answers merge into it. It returns how many it seeded.
func (c *Client) Restore(s Saved) int {
	n := 0
	for k, sc := range s.Capabilities {
		v := c.capsView(k)
		v.mu.Lock()
		if v.lkg == nil {
			v.lkg = &answer[[]apiv1.CapabilityEntry]{epoch: sc.RegistryEpoch, revision: sc.Revision, complete: sc.Complete, body: sc.Entries}
			v.lkgAt, v.checkedAt, v.lastErr = s.SavedAt, s.SavedAt, ErrRestored
			n++
		}
		v.mu.Unlock()
	}
	return n
}
