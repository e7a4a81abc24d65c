package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestRunDNS(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "ok.test." {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "ok.test.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(127, 0, 0, 1)})
		} else {
			m.SetRcode(r, dns.RcodeNameError)
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	rep, err := RunDNS(context.Background(), DNSConfig{Server: pc.LocalAddr().String(), Name: "ok.test.", Qtype: "A", Concurrency: 2, Duration: 200 * time.Millisecond})
	if err != nil || rep.Ops == 0 || rep.Errors != 0 || rep.Answers != 1 || rep.PerSecond <= 0 {
		t.Errorf("report = %+v, %v", rep, err)
	}
	rep, _ = RunDNS(context.Background(), DNSConfig{Server: pc.LocalAddr().String(), Name: "missing.test.", Qtype: "A", Concurrency: 1, Duration: 100 * time.Millisecond})
	if rep.Ops != 0 || rep.Errors == 0 || rep.FirstError != "NXDOMAIN with 0 answers" {
		t.Errorf("NXDOMAIN counted as %+v", rep)
	}
	if _, err := RunDNS(context.Background(), DNSConfig{Server: pc.LocalAddr().String(), Name: "x.", Qtype: "NOPE"}); err == nil {
		t.Error("an unknown query type was accepted")
	}
	if _, err := RunDNS(context.Background(), DNSConfig{Server: pc.LocalAddr().String(), Name: "ok.test.", Qtype: "A", ServerPID: 1 << 30}); err == nil {
		t.Error("a --server-pid whose CPU cannot be read was accepted (the report would lack its figure without a word)")
	}
}
