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
	key        entryKey // of the view's entry it answers for
	service    string   // lower case
	name       string   // the instance's, lower case
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

// index is the view by name, kept from the registry's delta watch: a change costs the names
// it touches, not the fleet (a whole fleet's view is 120,000 entries at 60,000 instances, and
// an evacuation changes 667 of them a second; rebuilding the index from the whole view at
// each revision took longer than a revision lasted). The Server guards it.
type index struct {
	domain   string
	epoch    string
	revision int64
	complete bool
	held     bool // it holds an answer (a first one came)

	// the view's entries by key, each instance's keys, and the entry DNS answers for each key
	// (nil: not in rotation, or no address to give)
	entries map[entryKey]apiv1.CapabilityEntry
	byInst  map[string]map[entryKey]struct{}
	built   map[entryKey]*entry
	// known counts the entries naming each capability, service and instance, by "kind/id"
	known map[string]int
	// capabilities by id; services and instances by lower-case name, with their entries in
	// rotation in preference order (byPreference). A service's and an instance's name answer
	// one entry per instance: its representative (rep), the built entry of its least key.
	caps      map[string][]*entry
	services  map[string][]*entry
	instances map[string][]*entry
	rep       map[string]*entry // by instance id
	bulk      bool              // the lists are being filled in any order, to be sorted once (apply)

	// packed answers to names of this revision (bounded by the view's names × types × sizes);
	// dropped at each change
	mu     sync.Mutex
	packed map[answerKey]packedAnswer
}

// entryKey names an entry of the view as a delta does.
type entryKey struct{ instance, capability, provider, version string }

func keyOf(c *apiv1.CapabilityEntry) entryKey {
	return entryKey{c.InstanceID, c.CapabilityID, c.Provider, c.CapabilityVersion}
}

func compareKeys(a, b entryKey) int {
	return cmp.Or(strings.Compare(a.instance, b.instance), strings.Compare(a.capability, b.capability),
		strings.Compare(a.provider, b.provider), strings.Compare(a.version, b.version))
}

func newIndex(domain string) *index {
	return &index{domain: domain, entries: map[entryKey]apiv1.CapabilityEntry{}, byInst: map[string]map[entryKey]struct{}{},
		built: map[entryKey]*entry{}, known: map[string]int{}, caps: map[string][]*entry{}, services: map[string][]*entry{},
		instances: map[string][]*entry{}, rep: map[string]*entry{}}
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

// apply folds a change of the view in (discovery.Delta.Apply, through the Keeper methods
// below) and drops the packed answers.
func (ix *index) apply(d *discovery.Delta) {
	ix.epoch, ix.revision, ix.complete, ix.held = d.Epoch, d.Revision, d.Complete, true
	ix.mu.Lock()
	ix.packed = nil
	ix.mu.Unlock()
	d.Apply(ix)
}

// Len implements discovery.Keeper.
func (ix *index) Len() int { return len(ix.entries) }

// Reset implements discovery.Keeper: the lists are appended to, then each sorted once
// (inserted in order one by one, a capability of 60,000 instances took 0.6 s).
func (ix *index) Reset(entries []apiv1.CapabilityEntry) {
	n := len(entries)
	ix.entries, ix.byInst, ix.built, ix.known = make(map[entryKey]apiv1.CapabilityEntry, n), make(map[string]map[entryKey]struct{}, n),
		make(map[entryKey]*entry, n), make(map[string]int, n)
	ix.caps, ix.services, ix.instances, ix.rep = map[string][]*entry{}, map[string][]*entry{}, make(map[string][]*entry, n), make(map[string]*entry, n)
	ix.bulk = true
	for i := range entries {
		ix.Put(entries[i])
	}
	ix.bulk = false
	for _, m := range []map[string][]*entry{ix.caps, ix.services, ix.instances} {
		for _, es := range m {
			slices.SortFunc(es, byPreference)
		}
	}
}

// Drop implements discovery.Keeper.
func (ix *index) Drop(id string, generation int64) {
	for k := range ix.byInst[id] {
		if ix.entries[k].Generation <= generation {
			ix.remove(k)
		}
	}
}

// Put implements discovery.Keeper: c in place of the entry of its key.
func (ix *index) Put(c apiv1.CapabilityEntry) {
	k := keyOf(&c)
	if _, ok := ix.entries[k]; ok {
		ix.remove(k)
	}
	ix.entries[k] = c
	keys := ix.byInst[c.InstanceID]
	if keys == nil {
		keys = map[entryKey]struct{}{}
		ix.byInst[c.InstanceID] = keys
	}
	keys[k] = struct{}{}
	for _, n := range namesOf(&c) {
		ix.known[n]++
	}
	if e := ix.entryOf(&c, k); e != nil {
		ix.built[k] = e
		ix.caps[c.CapabilityID] = ix.insertEntry(ix.caps[c.CapabilityID], e)
	}
	ix.elect(c.InstanceID)
}

// remove drops the entry of key k.
func (ix *index) remove(k entryKey) {
	c, ok := ix.entries[k]
	if !ok {
		return
	}
	delete(ix.entries, k)
	if keys := ix.byInst[k.instance]; keys != nil {
		delete(keys, k)
		if len(keys) == 0 {
			delete(ix.byInst, k.instance)
		}
	}
	for _, n := range namesOf(&c) {
		if ix.known[n]--; ix.known[n] <= 0 {
			delete(ix.known, n)
		}
	}
	if e := ix.built[k]; e != nil {
		delete(ix.built, k)
		setList(ix.caps, c.CapabilityID, removeEntry(ix.caps[c.CapabilityID], e))
	}
	ix.elect(k.instance)
}

// elect makes the built entry of the least key of instance id its representative under its
// service's and its own name.
func (ix *index) elect(id string) {
	var best *entry
	for k := range ix.byInst[id] {
		if e := ix.built[k]; e != nil && (best == nil || compareKeys(k, best.key) < 0) {
			best = e
		}
	}
	old := ix.rep[id]
	if old == best {
		return
	}
	if old != nil {
		setList(ix.services, old.service, removeEntry(ix.services[old.service], old))
		setList(ix.instances, old.name, removeEntry(ix.instances[old.name], old))
		delete(ix.rep, id)
	}
	if best != nil {
		ix.rep[id] = best
		ix.services[best.service] = ix.insertEntry(ix.services[best.service], best)
		ix.instances[best.name] = ix.insertEntry(ix.instances[best.name], best)
	}
}

// namesOf returns the known names an entry gives: its capability, service and instance.
func namesOf(c *apiv1.CapabilityEntry) [3]string {
	return [3]string{"cap/" + c.CapabilityID, "svc/" + strings.ToLower(c.ServiceName), "inst/" + strings.ToLower(c.InstanceID)}
}

// insertEntry puts e in es, kept in preference order (at the end while filling in bulk).
func (ix *index) insertEntry(es []*entry, e *entry) []*entry {
	if ix.bulk {
		return append(es, e)
	}
	i, _ := slices.BinarySearchFunc(es, e, byPreference)
	return slices.Insert(es, i, e)
}

// removeEntry takes e out of es.
func removeEntry(es []*entry, e *entry) []*entry {
	if i := slices.Index(es, e); i >= 0 {
		es = slices.Delete(es, i, i+1)
	}
	return es
}

// setList sets m[k] to es, or deletes it when es is empty.
func setList(m map[string][]*entry, k string, es []*entry) {
	if len(es) == 0 {
		delete(m, k)
		return
	}
	m[k] = es
}

// srvPriority maps metadata.priority (higher first) to SRV priority (lower first): 100 - p,
// within 0..65535.
func srvPriority(p int64) uint16 {
	return uint16(min(max(100-p, 0), 65535))
}

// entryOf is the entry DNS answers for c, of key k: nil when c is out of rotation (outside a
// panic) or has no host and port, or when its instance id cannot be a DNS label.
func (ix *index) entryOf(c *apiv1.CapabilityEntry, k entryKey) *entry {
	if !apiv1.InRotation(c.Eligibility) && !c.Panic {
		return nil
	}
	host, port, ok := apiv1.HostPort(c.Endpoint)
	if !ok {
		return nil
	}
	e := &entry{key: k, instance: c.InstanceID, provider: strings.ToLower(c.Provider), port: port, capability: c.CapabilityID,
		weight: uint16(min(max(c.Weight, 0), 65535)), major: -1, service: strings.ToLower(c.ServiceName), name: strings.ToLower(c.InstanceID)}
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
		e.target = e.name + ".inst." + ix.domain
		if _, ok := dns.IsDomainName(e.target); !ok {
			return nil // an instance id that cannot be a DNS label: no name to give its address
		}
	} else {
		e.target = dns.Fqdn(strings.ToLower(host))
	}
	return e
}

// byPreference orders a name's entries as a client would pick them — SRV priority (lower
// first), then weight (higher first), then instance id (and the rest of the entry's key) —
// so that an answer cut to fit its
// message keeps the most preferred records, the same ones every time.
func byPreference(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(b.weight, a.weight), compareKeys(a.key, b.key))
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
		return ix.services[n.id], ix.known["svc/"+n.id] > 0
	case kindInstance:
		return ix.instances[n.id], ix.known["inst/"+n.id] > 0
	}
	if ix.known["cap/"+n.capability] == 0 {
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
