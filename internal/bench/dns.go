package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNSConfig configures RunDNS: a dnsperf-style load of one query over UDP.
type DNSConfig struct {
	// Server is host:port of the DNS server.
	Server string
	// Name and Qtype are the query (default SRV).
	Name  string
	Qtype string
	// Concurrency is how many queries are in flight (default 32), each worker on its own
	// socket, sending its next query when the answer arrives.
	Concurrency int
	// Duration is how long the load runs (default 10 s).
	Duration time.Duration
	// Timeout bounds one query (default 1 s); a timed-out query counts as an error.
	Timeout time.Duration
	// UDPSize is the EDNS0 buffer size asked for (default 4096: answers of a few dozen
	// records fit one datagram).
	UDPSize uint16
	// ServerPID, when set, is the server's process on this machine: the report then gives
	// its CPU time per query.
	ServerPID int
}

func (c *DNSConfig) setDefaults() {
	if c.Qtype == "" {
		c.Qtype = "SRV"
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 32
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.UDPSize == 0 {
		c.UDPSize = 4096
	}
}

// DNSReport is what RunDNS measured.
type DNSReport struct {
	Server      string `json:"server"`
	Name        string `json:"name"`
	Qtype       string `json:"qtype"`
	Concurrency int    `json:"concurrency"`
	// Answers is the number of answer records of the last good response.
	Answers int `json:"answers"`
	Phase
}

// RunDNS sends cfg's query as fast as the server answers, for cfg.Duration, and reports
// queries per second and the latency percentiles. A response with another id, a rcode other
// than NOERROR or no answer is an error.
func RunDNS(ctx context.Context, cfg DNSConfig) (*DNSReport, error) {
	cfg.setDefaults()
	qtype, ok := dns.StringToType[cfg.Qtype]
	if !ok || cfg.Name == "" || cfg.Server == "" {
		return nil, fmt.Errorf("bench dns: want --server, --name and a query type, got %q %q %q", cfg.Server, cfg.Name, cfg.Qtype)
	}
	if err := checkPID("--server-pid", cfg.ServerPID); err != nil {
		return nil, fmt.Errorf("bench dns: %w", err)
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(cfg.Name), qtype)
	q.SetEdns0(cfg.UDPSize, false)
	query, err := q.Pack()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	type result struct {
		lat      []time.Duration
		errs     int
		firstErr string
		answers  int
	}
	results := make([]result, cfg.Concurrency)
	var wg sync.WaitGroup
	m := startMeter(cfg.ServerPID)
	start := time.Now()
	for w := range cfg.Concurrency {
		wg.Go(func() {
			r := &results[w]
			fail := func(err error) {
				r.errs++
				if r.firstErr == "" {
					r.firstErr = err.Error()
				}
			}
			conn, err := net.Dial("udp", cfg.Server)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			pkt := slices.Clone(query)
			buf := make([]byte, 65535)
			var resp dns.Msg
			for id := uint16(w) << 10; ctx.Err() == nil; id++ {
				pkt[0], pkt[1] = byte(id>>8), byte(id)
				t0 := time.Now()
				conn.SetDeadline(t0.Add(cfg.Timeout))
				if _, err := conn.Write(pkt); err != nil {
					fail(err)
					continue
				}
				n, err := conn.Read(buf)
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					continue
				}
				d := time.Since(t0)
				if err := resp.Unpack(buf[:n]); err != nil {
					fail(err)
					continue
				}
				switch {
				case resp.Id != id:
					fail(errors.New("an answer to another query"))
				case resp.Rcode != dns.RcodeSuccess || len(resp.Answer) == 0:
					fail(fmt.Errorf("%s with %d answers", dns.RcodeToString[resp.Rcode], len(resp.Answer)))
				default:
					r.lat = append(r.lat, d)
					r.answers = len(resp.Answer)
				}
			}
		})
	}
	wg.Wait()
	rec := &recorder{name: "dns " + cfg.Qtype + " " + cfg.Name, start: start}
	rep := &DNSReport{Server: cfg.Server, Name: cfg.Name, Qtype: cfg.Qtype, Concurrency: cfg.Concurrency}
	for _, r := range results {
		rec.latencies = append(rec.latencies, r.lat...)
		rec.errors += r.errs
		if rec.firstErr == "" {
			rec.firstErr = r.firstErr
		}
		rep.Answers = max(rep.Answers, r.answers)
	}
	rep.Phase = rec.phase()
	rep.Phase.Duration = min(rep.Phase.Duration, cfg.Duration)
	if rep.Phase.Duration > 0 {
		rep.PerSecond = float64(rep.Ops) / rep.Phase.Duration.Seconds()
	}
	m.stop(&rep.Phase)
	return rep, nil
}

// WriteDNS prints r for people.
func WriteDNS(w io.Writer, r *DNSReport) error {
	if _, err := fmt.Fprintf(w, "dns %s, %s %s (%d answers), concurrency %d\n\n", r.Server, r.Qtype, r.Name, r.Answers, r.Concurrency); err != nil {
		return err
	}
	return WriteTable(w, []Phase{r.Phase})
}
