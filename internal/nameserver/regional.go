package nameserver

import (
	"github.com/miekg/dns"

	"github.com/meshflows/meshflows/internal/region"
)

// Regional answers DNS region by region: one Server per region, each over its own region's
// registry and its own last-known-good view, never merged. A name is answered with its home
// region's members while home is on and has some; else with the next region's of the plan
// that is on and has some; else with home's own answer (NODATA, NXDOMAIN), or, with home off,
// the first region on that knows the name.
type Regional struct {
	plan    *region.Plan
	servers []*Server // in the plan's order
}

// NewRegional returns the front of servers (by region name; each region of plan has one).
func NewRegional(plan *region.Plan, servers map[string]*Server) *Regional {
	r := &Regional{plan: plan}
	for _, name := range plan.Names() {
		r.servers = append(r.servers, servers[name])
	}
	return r
}

// ServeDNS answers req from the region Choose picks.
func (r *Regional) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	type reply struct {
		wire  []byte
		rcode int
		done  bool
	}
	replies := make([]reply, len(r.servers))
	get := func(i int) reply {
		if !replies[i].done {
			wire, rcode := r.servers[i].reply(req, w.RemoteAddr())
			replies[i] = reply{wire, rcode, true}
		}
		return replies[i]
	}
	i, _ := region.Choose(r.plan, len(r.servers), func(i int) region.Readiness {
		switch rp := get(i); {
		case rp.rcode == dns.RcodeSuccess && answers(rp.wire) > 0:
			return region.Ready
		case rp.rcode == dns.RcodeSuccess || rp.rcode == dns.RcodeNameError:
			return region.Panic // an answer, of nothing: home's stands when no region has members
		}
		return region.None
	})
	qtype := "none"
	if len(req.Question) == 1 {
		qtype = dns.TypeToString[req.Question[0].Qtype]
	}
	if i < 0 { // no region on (the routing control never leaves none; a signal never read does)
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeServerFailure)
		r.servers[0].metrics.query(qtype, dns.RcodeToString[dns.RcodeServerFailure])
		wire, _ := m.Pack()
		w.Write(wire)
		return
	}
	rp := get(i)
	r.servers[i].metrics.query(qtype, dns.RcodeToString[rp.rcode])
	if rp.wire != nil {
		w.Write(rp.wire)
	}
}

// answers is the answer count of a packed message (its header's ANCOUNT).
func answers(wire []byte) int {
	if len(wire) < 12 {
		return 0
	}
	return int(wire[6])<<8 | int(wire[7])
}

var _ dns.Handler = (*Regional)(nil)
