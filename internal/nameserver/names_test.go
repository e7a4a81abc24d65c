package nameserver

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// answer builds the reply to req from the view as it stands (what reply does, without its
// wire cache).
func (s *Server) answer(req *dns.Msg, from net.Addr) *dns.Msg {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ix, meta, err := s.view()
	return s.answerFrom(req, from, ix, meta, err)
}

func TestParseName(t *testing.T) {
	tests := []struct {
		q    string
		want string // kind capability provider major id, or "" for not ours
	}{
		{"messaging.publish.cap.meshflows.", "cap messaging.publish  -1 "},
		{"_jms.messaging.publish.cap.meshflows.", "cap messaging.publish jms -1 "},
		{"v1.messaging.publish.cap.meshflows.", "cap messaging.publish  1 "},
		{"_jms.v12.messaging.publish.cap.meshflows.", "cap messaging.publish jms 12 "},
		{"egress-jms.svc.meshflows.", "svc   -1 egress-jms"},
		{"jms-1.inst.meshflows.", "inst   -1 jms-1"},
		{"v01.messaging.publish.cap.meshflows.", "cap v01.messaging.publish  -1 "}, // not a canonical major: part of the id
		{"_.messaging.publish.cap.meshflows.", ""},
		{"publish.cap.meshflows.", ""},
		{"a.b.svc.meshflows.", ""},
		{"cap.meshflows.", ""},
		{"meshflows.", ""},
		{"messaging.publish.cap.other.", ""},
		{"messaging.publish.dog.meshflows.", ""},
	}
	for _, tt := range tests {
		t.Run(tt.q, func(t *testing.T) {
			n, err := parseName(tt.q, "meshflows.")
			got := ""
			if err == nil {
				got = fmt.Sprintf("%s %s %s %d %s", n.kind, n.capability, n.provider, n.major, n.id)
			}
			if got != tt.want {
				t.Errorf("parseName(%q) = %q, want %q", tt.q, got, tt.want)
			}
		})
	}
}

// FuzzParseName: any name parses or is refused without panicking, and a parsed capability
// name has a valid capability id.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"messaging.publish.cap.meshflows.", "_jms.v1.a.b.cap.meshflows.", "x.svc.meshflows.", "\x00.cap.meshflows.", strings.Repeat("a.", 120) + "cap.meshflows."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		n, err := parseName(strings.ToLower(q), "meshflows.")
		if err == nil && n.kind == kindCapability && !apiv1.IsCapabilityID(n.capability) {
			t.Fatalf("%q parsed to the capability %q", q, n.capability)
		}
	})
}

// FuzzAnswer: any packet the server is handed gets an answer or is dropped by the DNS
// library, never a panic.
func FuzzAnswer(f *testing.F) {
	m := new(dns.Msg)
	m.SetQuestion("messaging.publish.cap.meshflows.", dns.TypeSRV)
	ok, _ := m.Pack()
	f.Add(ok)
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 33, 0, 1}) // a compression pointer to itself
	s := newBenchServer(f, 3)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		req := new(dns.Msg)
		if req.Unpack(pkt) != nil {
			return // the library drops what does not unpack
		}
		s.answer(req, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53})
	})
}

// newBenchServer is a server whose view holds n instances of messaging.publish.
func newBenchServer(tb testing.TB, n int) *Server {
	tb.Helper()
	reg := registrytest.NewServer(tb, registry.Config{})
	for i := range n {
		req := apiv1.RegisterRequest{InstanceID: fmt.Sprintf("jms-%03d", i), ServiceName: "egress-jms", ServiceVersion: "1.0.0",
			Endpoint:     fmt.Sprintf("http://10.0.%d.%d:7410", i/250, i%250+1),
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
			tb.Fatal(err)
		}
	}
	disc, err := discovery.New(discovery.Config{Registries: []string{reg.URL}, TTL: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Discovery: disc})
	if err != nil {
		tb.Fatal(err)
	}
	// the view as Run keeps it, from the delta watch: held once the first answer is applied
	ctx, cancel := context.WithCancel(context.Background())
	done, first := make(chan error, 1), make(chan struct{})
	go func() {
		done <- disc.WatchDeltas(ctx, query, func(d *discovery.Delta) {
			s.apply(d)
			select {
			case <-first:
			default:
				close(first)
			}
		})
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	select {
	case <-first:
	case err := <-done:
		tb.Fatalf("the watch ended before its first answer: %v", err)
	}
	return s
}

// BenchmarkSRV100 answers an SRV query for 100 instances from the in-memory view, as the
// server does: the packed answer of this revision, copied with the query's id (budget: 5 µs).
func BenchmarkSRV100(b *testing.B) {
	s := newBenchServer(b, 100)
	req := new(dns.Msg)
	req.SetQuestion("Messaging.Publish.cap.meshflows.", dns.TypeSRV)
	from := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	b.ReportAllocs()
	for b.Loop() {
		req.Id++
		wire, rcode := s.reply(req, from)
		if rcode != dns.RcodeSuccess || len(wire) < 2000 {
			b.Fatal(rcode, len(wire))
		}
	}
	var m dns.Msg
	wire, _ := s.reply(req, from)
	if err := m.Unpack(wire); err != nil || m.Id != req.Id || len(m.Answer) != 100 || m.Question[0].Name != "Messaging.Publish.cap.meshflows." {
		b.Fatalf("the copied answer: %v %+v", err, m.MsgHdr)
	}
}

// BenchmarkSRV100Cold builds and packs the same answer from scratch: the first query of a
// name after each change of the view.
func BenchmarkSRV100Cold(b *testing.B) {
	s := newBenchServer(b, 100)
	req := new(dns.Msg)
	req.SetQuestion("messaging.publish.cap.meshflows.", dns.TypeSRV)
	from := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	b.ReportAllocs()
	for b.Loop() {
		m := s.answer(req, from)
		if len(m.Answer) != 100 {
			b.Fatal(len(m.Answer))
		}
		if _, err := m.Pack(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMissReply answers names the per-revision cache never keeps (an unknown name, a
// TXT) through the server's path: what a resolver probing names costs.
func BenchmarkMissReply(b *testing.B) {
	s := newBenchServer(b, 100)
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}
	for _, q := range []struct {
		name  string
		qtype uint16
		rcode int
	}{{"nothing.cap.meshflows.", dns.TypeSRV, dns.RcodeNameError}, {"messaging.publish.cap.meshflows.", dns.TypeTXT, dns.RcodeSuccess}} {
		b.Run(dns.TypeToString[q.qtype]+"/"+dns.RcodeToString[q.rcode], func(b *testing.B) {
			req := new(dns.Msg)
			req.SetQuestion(q.name, q.qtype)
			b.ReportAllocs()
			for b.Loop() {
				if _, rcode := s.reply(req, from); rcode != q.rcode {
					b.Fatal(dns.RcodeToString[rcode])
				}
			}
		})
	}
}
