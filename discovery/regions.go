package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// RegionsConfig configures Regions.
type RegionsConfig struct {
	// Home is the consumer's own region.
	Home string
	// Clients holds one Client per region, home's included, each reading that region's
	// registry only.
	Clients map[string]*Client
	// Priority is the order the other regions are tried in after home (default: their names
	// in order); regions it leaves out come after it, by name.
	Priority []string
	// On says whether a region takes traffic (the routing control's signal, which the
	// caller follows); nil: every region is on.
	On func(region string) bool
	// Admit draws whether a read that region is ready for goes to it: a region on its way
	// back after it was off gets only a share of the reads (the caller's ramp); nil: always.
	Admit func(region string) bool
	// Ready says whether a region's answer is ready to take traffic (default Ready; a
	// consumer that reads include=all and judges panic itself gives its own).
	Ready func([]apiv1.CapabilityEntry) bool
}

// Regions reads discovery views region by region: one Client per region, each with its own
// watch and its own last-known-good view, never merged. A read is answered by the home
// region while it is on and ready (it has instances in rotation and is not in panic), else
// by the next region of the priority order that is; when none is, by home's own answer (its
// panic pool), or, with home off, by the first region on that has any instance. Meta.Region
// names the region that answered.
type Regions struct {
	cfg   RegionsConfig
	order []string
}

// NewRegions returns a Regions.
func NewRegions(cfg RegionsConfig) (*Regions, error) {
	if _, ok := cfg.Clients[cfg.Home]; !ok || cfg.Home == "" {
		return nil, fmt.Errorf("discovery: no client for the home region %q", cfg.Home)
	}
	order := []string{cfg.Home}
	for _, r := range cfg.Priority {
		if _, ok := cfg.Clients[r]; !ok {
			return nil, fmt.Errorf("discovery: the priority names region %q, which has no client", r)
		}
		if !slices.Contains(order, r) {
			order = append(order, r)
		}
	}
	var rest []string
	for r := range cfg.Clients {
		if !slices.Contains(order, r) {
			rest = append(rest, r)
		}
	}
	slices.Sort(rest)
	if cfg.Ready == nil {
		cfg.Ready = Ready
	}
	return &Regions{cfg: cfg, order: append(order, rest...)}, nil
}

// Order is the order regions are tried in: home first.
func (rs *Regions) Order() []string { return slices.Clone(rs.order) }

// Client returns the client of region (nil when it has none).
func (rs *Regions) Client(region string) *Client { return rs.cfg.Clients[region] }

func (rs *Regions) on(region string) bool { return rs.cfg.On == nil || rs.cfg.On(region) }

// Capabilities reads q in each region, in order, until one that is on is ready.
func (rs *Regions) Capabilities(ctx context.Context, q Query) (*Result, error) {
	type read struct {
		res *Result
		err error
	}
	reads := make([]read, len(rs.order))
	get := func(i int) read {
		if reads[i].res == nil && reads[i].err == nil {
			res, err := rs.cfg.Clients[rs.order[i]].Capabilities(ctx, q)
			if res != nil {
				res.Region = rs.order[i]
			}
			reads[i] = read{res, err}
		}
		return reads[i]
	}
	for i, r := range rs.order {
		if !rs.on(r) {
			continue
		}
		if rd := get(i); rd.err == nil && rs.cfg.Ready(rd.res.Entries) && (rs.cfg.Admit == nil || rs.cfg.Admit(r)) {
			return rd.res, nil
		}
	}
	if rs.on(rs.cfg.Home) {
		rd := get(0)
		return rd.res, rd.err
	}
	var errs []error
	for i, r := range rs.order {
		if !rs.on(r) {
			continue
		}
		rd := get(i)
		if rd.err == nil && len(rd.res.Entries) > 0 {
			return rd.res, nil
		}
		if rd.err != nil {
			errs = append(errs, fmt.Errorf("region %s: %w", r, rd.err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Result{Meta: Meta{Region: rs.cfg.Home}}, nil
}

// Ready says whether a pool answered by a registry is ready to take traffic: it has an
// instance in rotation and is not in panic.
func Ready(entries []apiv1.CapabilityEntry) bool {
	in := false
	for _, e := range entries {
		if e.Panic {
			return false
		}
		in = in || apiv1.InRotation(e.Eligibility)
	}
	return in
}
