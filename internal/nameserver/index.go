package nameserver

import (
	"cmp"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
)

// entry is one instance's capability as DNS answers it.
type entry struct {
	instance   string
	provider   string
	major      int
	priority   uint16
	weight     uint16
	port       uint16
	target     string // the SRV target: the instance's name, or the endpoint's host name
	ip         net.IP // nil for a host name endpoint
	capability string
}

func (e *entry) srv(name string, ttl uint32) dns.RR {
	return &dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: ttl},
		Priority: e.priority, Weight: e.weight, Port: e.port, Target: e.target}
}

// address is the A or AAAA record of an IP endpoint, named as the SRV target; nil otherwise.
func (e *entry) address(ttl uint32) dns.RR {
	switch {
	case e.ip == nil:
		return nil
	case e.ip.To4() != nil:
		return &dns.A{Hdr: dns.RR_Header{Name: e.target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: e.ip.To4()}
	default:
		return &dns.AAAA{Hdr: dns.RR_Header{Name: e.target, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: e.ip}
	}
}

// index is one view by name: every known name, with the entries in rotation.
type index struct {
	epoch    string
	revision int64
	complete bool
	// capabilities by id; services and instances by name, with their entries in rotation
	// (nil: known, none in rotation)
	caps      map[string][]*entry
	known     map[string]bool // every capability, service and instance known, by "kind/id"
	services  map[string][]*entry
	instances map[string][]*entry

	// packed answers to names of this view (bounded by the view's names × types × sizes)
	mu     sync.Mutex
	packed map[answerKey]packedAnswer
}

// packedAnswer is an answer as packed once, and whether records were left out to fit it.
type packedAnswer struct {
	wire      []byte
	truncated bool
}

// maxPacked bounds the packed answers an index keeps.
const maxPacked = 10_000

func (ix *index) cached(k answerKey) (packedAnswer, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	a, ok := ix.packed[k]
	return a, ok
}

func (ix *index) store(k answerKey, a packedAnswer) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.packed == nil {
		ix.packed = map[answerKey]packedAnswer{}
	}
	if len(ix.packed) < maxPacked {
		ix.packed[k] = a
	}
}

// srvPriority maps metadata.priority (higher first) to SRV priority (lower first): 100 - p,
// within 0..65535.
func srvPriority(p int64) uint16 {
	return uint16(min(max(100-p, 0), 65535))
}

func buildIndex(res *discovery.Result, domain string) *index {
	ix := &index{epoch: res.RegistryEpoch, revision: res.Revision, complete: res.Complete, caps: map[string][]*entry{},
		known: map[string]bool{}, services: map[string][]*entry{}, instances: map[string][]*entry{}}
	for _, c := range res.Entries {
		ix.known["cap/"+c.CapabilityID] = true
		ix.known["svc/"+strings.ToLower(c.ServiceName)] = true
		ix.known["inst/"+strings.ToLower(c.InstanceID)] = true
		if !apiv1.InRotation(c.Eligibility) && !c.Panic {
			continue
		}
		host, port, ok := apiv1.HostPort(c.Endpoint)
		if !ok {
			continue
		}
		e := &entry{instance: c.InstanceID, provider: strings.ToLower(c.Provider), port: port, capability: c.CapabilityID,
			weight: uint16(min(max(c.Weight, 0), 65535)), major: -1}
		if p, err := apiv1.Priority(c.Metadata); err == nil {
			e.priority = srvPriority(p)
		} else {
			e.priority = srvPriority(0)
		}
		if m, _, ok := strings.Cut(c.CapabilityVersion, "."); ok {
			e.major = atoi(m)
		}
		if ip := net.ParseIP(host); ip != nil {
			e.ip = ip
			e.target = strings.ToLower(c.InstanceID) + ".inst." + domain
			if _, ok := dns.IsDomainName(e.target); !ok {
				continue // an instance id that cannot be a DNS label: no name to give its address
			}
		} else {
			e.target = dns.Fqdn(strings.ToLower(host))
		}
		ix.caps[c.CapabilityID] = append(ix.caps[c.CapabilityID], e)
		svc := strings.ToLower(c.ServiceName)
		ix.services[svc] = appendInstance(ix.services[svc], e)
		id := strings.ToLower(c.InstanceID)
		ix.instances[id] = appendInstance(ix.instances[id], e)
	}
	for _, m := range []map[string][]*entry{ix.caps, ix.services, ix.instances} {
		for _, es := range m {
			slices.SortFunc(es, byPreference)
		}
	}
	return ix
}

// byPreference orders a name's entries as a client would pick them — SRV priority (lower
// first), then weight (higher first), then instance id — so that an answer cut to fit its
// message keeps the most preferred records, the same ones every time.
func byPreference(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.weight, a.weight), strings.Compare(a.instance, b.instance))
}

// appendInstance adds e unless its instance is already there (an instance with several
// capabilities answers once for its service or its name).
func appendInstance(es []*entry, e *entry) []*entry {
	for _, x := range es {
		if x.instance == e.instance {
			return es
		}
	}
	return append(es, e)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' || n > 1<<20 {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// lookup returns the entries in rotation of n and whether n is a known name.
func (ix *index) lookup(n name) ([]*entry, bool) {
	switch n.kind {
	case kindService:
		return ix.services[n.id], ix.known["svc/"+n.id]
	case kindInstance:
		return ix.instances[n.id], ix.known["inst/"+n.id]
	}
	if !ix.known["cap/"+n.capability] {
		return nil, false
	}
	all := ix.caps[n.capability]
	if n.provider == "" && n.major < 0 {
		return all, true
	}
	var out []*entry
	for _, e := range all {
		if (n.provider == "" || e.provider == n.provider) && (n.major < 0 || e.major == n.major) {
			out = append(out, e)
		}
	}
	return out, true
}
