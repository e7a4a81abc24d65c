package nameserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshflows/meshflows/discovery"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	DefaultDomain = "meshflows."
	DefaultTTL    = 5 * time.Second
)

// Config configures a Server.
type Config struct {
	// Discovery reads the registry's view (its TTL, last-known-good and stale allowance
	// apply to every answer).
	Discovery *discovery.Client
	// Domain is the zone answered (default "meshflows.").
	Domain string
	// TTL is the TTL of answers (default 5 s); never longer than the time left of the
	// view's stale allowance.
	TTL time.Duration
	// StaleAllowance is the discovery client's, for the TTL bound (default no bound).
	StaleAllowance time.Duration
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
	Now            func() time.Time
	// Tracer, when set, serves every query in a span ("dns SRV", its name and rcode).
	Tracer trace.Tracer
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	if c.Discovery == nil {
		return errors.New("nameserver: no discovery client")
	}
	if _, ok := dns.IsDomainName(c.Domain); !ok || !dns.IsFqdn(c.Domain) {
		return fmt.Errorf("nameserver: domain %q: want a fully qualified name like \"meshflows.\"", c.Domain)
	}
	if c.TTL < time.Second {
		return fmt.Errorf("nameserver: ttl %s: at least 1s", c.TTL)
	}
	return nil
}

// Server answers DNS queries from the discovery view.
type Server struct {
	cfg     Config
	domain  string
	metrics *metrics

	// mu guards index: the watch writes it, queries read it
	mu    sync.RWMutex
	index *index

	lastTruncLog atomic.Int64 // unix nanoseconds of the last truncation logged

	front dns.Handler // answers what Run serves, when set (ServeThrough)
}

// ServeThrough makes Run serve its connections through h — a Regional front over this
// server and its peers'. Call it before Run.
func (s *Server) ServeThrough(h dns.Handler) { s.front = h }

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	cfg.Domain = dns.Fqdn(strings.ToLower(cfg.Domain))
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.StaleAllowance == 0 {
		cfg.StaleAllowance = discovery.NoStaleBound
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, domain: cfg.Domain, metrics: m, index: newIndex(cfg.Domain)}, nil
}

// query is the view the server answers: every instance, in rotation or not, so that a known
// name with none in rotation is NODATA, not NXDOMAIN.
var query = discovery.Query{IncludeAll: true}

// Run keeps the view current with the discovery client's delta watch (each change applied to
// the index by name) and serves DNS on the packet conn and the listener (either may be nil)
// until ctx ends.
func (s *Server) Run(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() { errs <- s.cfg.Discovery.WatchDeltas(ctx, query, s.apply) })
	var servers []*dns.Server
	var h dns.Handler = s
	if s.front != nil {
		h = s.front
	}
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: h})
	}
	if ln != nil {
		servers = append(servers, &dns.Server{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	}
	for _, srv := range servers {
		wg.Go(func() {
			if err := srv.ActivateAndServe(); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("dns: %w", err)
				cancel()
			}
		})
	}
	<-ctx.Done()
	for _, srv := range servers {
		srv.ShutdownContext(context.Background())
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

// apply folds a change of the view into the index (discovery.WatchDeltas).
func (s *Server) apply(d *discovery.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index.apply(d)
}

// view returns the index and its meta, as Run's watch keeps it: a query never waits on the
// registry. The discovery client's rules decide fresh, stale (last-known-good) or
// unavailable. The caller holds s.mu for reading while it uses the index.
func (s *Server) view() (*index, discovery.Meta, error) {
	st, age := s.cfg.Discovery.DeltaState(query)
	ix := s.index
	switch {
	case st == discovery.StateUninitialized || st == discovery.StateExpired:
		return nil, discovery.Meta{}, &discovery.UnavailableError{State: st, Age: age}
	case !ix.held: // heard, and not yet applied
		return nil, discovery.Meta{}, &discovery.UnavailableError{State: discovery.StateUninitialized}
	}
	source := discovery.SourceCache
	if st == discovery.StateStale {
		source = discovery.SourceSnapshot
	}
	return ix, discovery.Meta{Source: source, State: st, Age: age, RegistryEpoch: ix.epoch, Revision: ix.revision, Complete: ix.complete}, nil
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	var span trace.Span
	if s.cfg.Tracer != nil {
		_, span = s.cfg.Tracer.Start(context.Background(), "dns query", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
	}
	wire, rcode := s.reply(req, w.RemoteAddr())
	qtype := "none"
	if len(req.Question) == 1 {
		qtype = dns.TypeToString[req.Question[0].Qtype]
	}
	s.metrics.query(qtype, dns.RcodeToString[rcode])
	if span != nil {
		span.SetName("dns " + qtype)
		span.SetAttributes(attribute.String("dns.question.type", qtype), attribute.String("dns.response.code", dns.RcodeToString[rcode]))
		if len(req.Question) == 1 {
			span.SetAttributes(attribute.String("dns.question.name", req.Question[0].Name))
		}
	}
	if wire != nil {
		w.Write(wire)
	}
}

// reply returns the wire answer to req and its rcode. Answers to names of the view are
// packed once per (name, type, size, TTL) and revision: a repeated query copies them and
// sets its own id, flags and name case. Nothing is kept for names that do not exist.
func (s *Server) reply(req *dns.Msg, from net.Addr) ([]byte, int) {
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		m := s.answerFrom(req, from, nil, discovery.Meta{}, nil) // refused before any view is needed
		wire, _ := m.Pack()
		return wire, m.Rcode
	}
	q := req.Question[0]
	size, edns := dns.MinMsgSize, 0
	if o := req.IsEdns0(); o != nil {
		size, edns = max(int(o.UDPSize()), dns.MinMsgSize), 1
	}
	if _, tcp := from.(*net.TCPAddr); tcp {
		size = dns.MaxMsgSize
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, meta, err := s.view()
	if err != nil {
		m := s.answerFrom(req, from, ix, meta, err)
		wire, _ := m.Pack()
		return wire, m.Rcode
	}
	key := answerKey{name: strings.ToLower(q.Name), qtype: q.Qtype, size: size, edns: edns, ttl: s.ttl(meta), source: sourceOf(meta)}
	if a, ok := ix.cached(key); ok {
		s.truncated(a.truncated, from, key.name)
		return patch(a.wire, req), dns.RcodeSuccess
	}
	m := s.answerFrom(req, from, ix, meta, nil) // the view just read: not read again
	cut := s.fit(m, req, from)
	wire, err := m.Pack()
	if err != nil {
		s.cfg.Logger.Warn("dns answer could not be packed", slog.String("name", q.Name), slog.Any("error", err))
		return nil, dns.RcodeServerFailure
	}
	s.truncated(cut, from, key.name)
	if m.Rcode == dns.RcodeSuccess && q.Qtype != dns.TypeTXT { // TXT carries the age: never cached
		ix.store(key, packedAnswer{wire: wire, truncated: cut})
	}
	return wire, m.Rcode
}

// truncated counts an answer that left records out to fit its message, and says so in the
// log at most once a minute.
func (s *Server) truncated(cut bool, from net.Addr, name string) {
	if !cut {
		return
	}
	transport := "udp"
	if _, tcp := from.(*net.TCPAddr); tcp {
		transport = "tcp"
	}
	s.metrics.truncations.WithLabelValues(transport).Inc()
	now := s.cfg.Now()
	if last := s.lastTruncLog.Load(); last != 0 && now.Sub(time.Unix(0, last)) < time.Minute {
		return
	}
	s.lastTruncLog.Store(now.UnixNano())
	msg := "a DNS answer over UDP was truncated (TC): the client asks again over TCP"
	if transport == "tcp" {
		msg = "a DNS answer over TCP holds only the records that fit in 64 KiB, the most preferred first"
	}
	s.cfg.Logger.Info(msg, slog.String("name", name), slog.String("counted_in", "meshflows_dns_truncated_total"))
}

// answerKey names one packed answer of an index.
type answerKey struct {
	name   string
	qtype  uint16
	size   int
	edns   int
	ttl    uint32
	source string
}

// patch copies a packed answer for req: its id, its RD and CD bits, and the case of its name.
func patch(cached []byte, req *dns.Msg) []byte {
	wire := make([]byte, len(cached))
	copy(wire, cached)
	wire[0], wire[1] = byte(req.Id>>8), byte(req.Id)
	wire[2] = wire[2]&^0x01 | boolBit(req.RecursionDesired)
	wire[3] = wire[3]&^0x10 | boolBit(req.CheckingDisabled)<<4
	// the question's name is the first thing after the header, uncompressed: only its case
	// differs from the cached one
	name := req.Question[0].Name
	off := 12
	for i := 0; i < len(name) && off < len(wire); {
		n := int(wire[off])
		if n == 0 {
			break
		}
		off++
		for j := 0; j < n && i < len(name) && off < len(wire); j++ {
			if name[i] == '\\' { // an escaped name: leave the cached spelling
				return wire
			}
			wire[off] = name[i]
			off++
			i++
		}
		i++ // the dot
	}
	return wire
}

func boolBit(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// answerFrom builds the reply to req from the view ix (viewErr: the view is unavailable).
func (s *Server) answerFrom(req *dns.Msg, from net.Addr, ix *index, meta discovery.Meta, viewErr error) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	m.Compress = true
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		return m
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		m.SetRcode(req, dns.RcodeNotImplemented)
		return m
	}
	qname := strings.ToLower(q.Name)
	n, err := parseName(qname, s.domain)
	if err != nil {
		if qname == s.domain && q.Qtype == dns.TypeSOA {
			m.Answer = append(m.Answer, s.soa())
			return m
		}
		if strings.HasSuffix(qname, s.domain) || qname == s.domain {
			m.SetRcode(req, dns.RcodeNameError)
			m.Ns = append(m.Ns, s.soa())
			return m
		}
		m.SetRcode(req, dns.RcodeRefused) // not our zone: we recurse for nobody
		return m
	}
	if q.Qtype == dns.TypeANY { // RFC 8482: a minimal answer instead of everything
		m.Answer = append(m.Answer, &dns.HINFO{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: 3600}, Cpu: "RFC8482"})
		return m
	}
	if viewErr != nil {
		m.SetRcode(req, dns.RcodeServerFailure) // the view is unavailable (never fetched, or expired)
		return m
	}
	s.metrics.source(string(meta.Source))
	set, known := ix.lookup(n)
	if !known {
		m.SetRcode(req, dns.RcodeNameError)
		m.Ns = append(m.Ns, s.soa())
		return m
	}
	ttl := s.ttl(meta)
	switch q.Qtype {
	case dns.TypeSRV:
		for _, e := range set {
			m.Answer = append(m.Answer, e.srv(q.Name, ttl))
			if a := e.address(ttl); a != nil {
				m.Extra = append(m.Extra, a)
			}
		}
	case dns.TypeA, dns.TypeAAAA:
		for _, e := range set {
			if a := e.address(ttl); a != nil && a.Header().Rrtype == q.Qtype {
				a := dns.Copy(a)
				a.Header().Name = q.Name
				m.Answer = append(m.Answer, a)
			}
		}
	case dns.TypeTXT:
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: ttl},
			Txt: []string{"epoch=" + meta.RegistryEpoch, "revision=" + strconv.FormatInt(meta.Revision, 10),
				"source=" + sourceOf(meta), "age=" + strconv.Itoa(int(meta.Age/time.Second)) + "s", "in_rotation=" + strconv.Itoa(len(set))}})
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, s.soa()) // NODATA: the name is known, nothing of that type in rotation
	}
	return m
}

// sourceOf says fresh or snapshot (last-known-good) for a TXT answer.
func sourceOf(meta discovery.Meta) string {
	if meta.Source == discovery.SourceSnapshot {
		return "snapshot"
	}
	return "fresh"
}

// ttl is the configured TTL, never past the time left of the view's stale allowance.
func (s *Server) ttl(meta discovery.Meta) uint32 {
	ttl := s.cfg.TTL
	if meta.Source == discovery.SourceSnapshot {
		ttl = min(ttl, max(s.cfg.StaleAllowance-meta.Age, time.Second))
	}
	return uint32(ttl / time.Second)
}

// fit cuts an answer to what its transport carries and reports whether records were left
// out: over UDP, 512 bytes or the client's EDNS0 size, with the TC bit, which sends the
// client to TCP; over TCP, the 64 KiB of a DNS message, without TC (there is nowhere further
// to go). The records kept are the first ones, the most preferred (byPreference).
func (s *Server) fit(m, req *dns.Msg, from net.Addr) bool {
	size := dns.MinMsgSize
	if o := req.IsEdns0(); o != nil {
		size = max(int(o.UDPSize()), dns.MinMsgSize)
		m.SetEdns0(o.UDPSize(), false)
	}
	_, tcp := from.(*net.TCPAddr)
	if tcp {
		size = dns.MaxMsgSize
	}
	if m.Len() <= size {
		return false
	}
	m.Truncate(size)
	if tcp {
		m.Truncated = false
	}
	return true
}

func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: s.domain, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: uint32(s.cfg.TTL / time.Second)},
		Ns: "ns." + s.domain, Mbox: "hostmaster." + s.domain, Serial: 1, Refresh: 60, Retry: 60, Expire: 600, Minttl: uint32(s.cfg.TTL / time.Second)}
}
