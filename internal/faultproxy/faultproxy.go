// Package faultproxy is the drill's fault injector: a small HTTP proxy in front of one
// provider that passes its traffic, or breaks it on demand the ways real instances break —
// a closed port, connections reset, connections accepted and never answered, every request
// delayed, a share of requests answered 500, a failing health endpoint — without touching
// the provider's code.
//
// It tells traffic from health probes by path (Config.HealthPath), so a fault can hit one
// and spare the other, as real grey failures do, and it counts both: how many requests
// reached it and, for traffic, when each consumer (by the X-Forwarded-Host a gateway sets)
// last sent one.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with connections.
type Mode string

// The modes of a Fault.
const (
	// Pass forwards every request (the other fields of the Fault still apply).
	Pass Mode = "pass"
	// Refuse closes the port: connecting fails at once (connection refused), as after a
	// crash; the connections already open are closed.
	Refuse Mode = "refuse"
	// Reset accepts connections and resets them (TCP RST) before any answer; the connections
	// already open are reset.
	Reset Mode = "reset"
	// Blackhole accepts connections and requests and never answers, like a hung process.
	Blackhole Mode = "blackhole"
)

// Fault is what the proxy injects. The zero value passes everything.
type Fault struct {
	Mode Mode `json:"mode,omitempty"`
	// Delay is added before every traffic request is forwarded (not to health probes).
	Delay time.Duration `json:"delay,omitempty"`
	// ErrorShare of traffic requests are answered 500 by the proxy itself, evenly spread
	// (every 1/ErrorShare-th request), 0..1.
	ErrorShare float64 `json:"error_share,omitempty"`
	// HealthFailing answers the health path 503 while traffic passes.
	HealthFailing bool `json:"health_failing,omitempty"`
	// HealthLoss leaves this share of health probes unanswered, at random (0..1): they hang
	// until the prober gives up, as probes lost on the way do.
	HealthLoss float64 `json:"health_loss,omitempty"`
}

// Validate reports whether f is a fault the proxy can inject.
func (f Fault) Validate() error {
	switch f.Mode {
	case "", Pass, Refuse, Reset, Blackhole:
	default:
		return fmt.Errorf("faultproxy: mode %q: want pass, refuse, reset or blackhole", f.Mode)
	}
	if f.ErrorShare < 0 || f.ErrorShare > 1 || f.HealthLoss < 0 || f.HealthLoss > 1 {
		return fmt.Errorf("faultproxy: error share %v, health loss %v: want 0..1", f.ErrorShare, f.HealthLoss)
	}
	if f.Delay < 0 {
		return fmt.Errorf("faultproxy: negative delay %v", f.Delay)
	}
	return nil
}

func (f Fault) mode() Mode {
	if f.Mode == "" {
		return Pass
	}
	return f.Mode
}

// Config configures a Proxy.
type Config struct {
	// Listen is the address the proxy serves on (the provider's registered endpoint).
	Listen string
	// Upstream is the provider's host:port.
	Upstream string
	// HealthPath is the provider's health endpoint: requests to it are probes, every other
	// request is traffic. Default /healthz.
	HealthPath string
	// Now is the clock of the traffic times (default time.Now).
	Now func() time.Time
}

// Validate checks cfg and fills its defaults.
func (c *Config) Validate() error {
	if c.HealthPath == "" {
		c.HealthPath = "/healthz"
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("faultproxy: listen %q: %w", c.Listen, err)
	}
	if _, _, err := net.SplitHostPort(c.Upstream); err != nil {
		return fmt.Errorf("faultproxy: upstream %q: %w", c.Upstream, err)
	}
	return nil
}

// Stats is what a proxy saw.
type Stats struct {
	// Traffic and Probes count the requests that reached the proxy (not those refused or
	// reset before a request was read).
	Traffic, Probes int64
	// Injected counts the traffic requests the proxy answered 500 itself.
	Injected int64
	// LastTraffic is when each consumer (its X-Forwarded-Host, or "-") last sent traffic.
	LastTraffic map[string]time.Time
}

// Proxy is a fault-injecting HTTP proxy for one provider. Set and SetUpstream may be
// called from any goroutine while Run serves.
type Proxy struct {
	cfg   Config
	proxy *httputil.ReverseProxy

	upstream atomic.Pointer[string]

	mu       sync.Mutex
	fault    Fault
	changed  chan struct{} // closed and replaced on every Set: held requests look again
	ln       net.Listener  // nil while refusing
	conns    map[net.Conn]struct{}
	served   uint64 // traffic requests seen under the current error share
	stats    Stats
	relisten chan struct{} // capacity 1: Run opens the port again
}

// New returns a proxy for cfg; it binds cfg.Listen at once, so a busy port fails here.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{cfg: cfg, ln: ln, conns: map[net.Conn]struct{}{}, changed: make(chan struct{}),
		relisten: make(chan struct{}, 1), stats: Stats{LastTraffic: map[string]time.Time{}}}
	up := cfg.Upstream
	p.upstream.Store(&up)
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = *p.upstream.Load()
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "faultproxy: upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	return p, nil
}

// Addr is the address the proxy serves on.
func (p *Proxy) Addr() string { return p.cfg.Listen }

// Set injects f from now on (the zero Fault restores normal service).
func (p *Proxy) Set(f Fault) error {
	if err := f.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.fault.mode()
	p.fault = f
	p.served = 0
	close(p.changed)
	p.changed = make(chan struct{})
	switch f.mode() {
	case Refuse:
		if p.ln != nil {
			p.ln.Close()
			p.ln = nil
		}
		for c := range p.conns {
			c.Close()
		}
	case Reset:
		for c := range p.conns {
			reset(c)
		}
	}
	if prev == Refuse && f.mode() != Refuse {
		select {
		case p.relisten <- struct{}{}:
		default:
		}
	}
	return nil
}

// SetUpstream sends the requests from now on to addr (host:port): another process took the
// provider's place. Open connections to the old one are not reused for new requests.
func (p *Proxy) SetUpstream(addr string) {
	p.upstream.Store(&addr)
	if t, ok := p.proxy.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

// Fault is the fault injected now.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Stats returns a copy of what the proxy saw so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.LastTraffic = make(map[string]time.Time, len(p.stats.LastTraffic))
	for k, v := range p.stats.LastTraffic {
		s.LastTraffic[k] = v
	}
	return s
}

// Run serves until ctx ends; it closes the port and every connection on return.
func (p *Proxy) Run(ctx context.Context) error {
	conns := make(chan net.Conn)
	srv := &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		}}
	cl := &chanListener{conns: conns, done: make(chan struct{}), addr: addrOf(p.cfg.Listen)}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(cl) })
	accept := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			switch p.Fault().mode() {
			case Reset:
				reset(c)
				continue
			case Refuse: // accepted just before the port closed
				c.Close()
				continue
			}
			select {
			case conns <- c:
			case <-ctx.Done():
				c.Close()
				return
			}
		}
	}
	p.mu.Lock()
	ln := p.ln
	p.mu.Unlock()
	wg.Go(func() { accept(ln) })
	var err error
	for err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.relisten:
			nl, lerr := net.Listen("tcp", p.cfg.Listen)
			if lerr != nil {
				err = fmt.Errorf("faultproxy: open %s again: %w", p.cfg.Listen, lerr)
				break
			}
			p.mu.Lock()
			if p.fault.mode() == Refuse { // refused again meanwhile
				nl.Close()
			} else {
				p.ln = nl
			}
			p.mu.Unlock()
			wg.Go(func() { accept(nl) })
		}
	}
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	close(p.changed) // release held requests
	p.changed = make(chan struct{})
	p.mu.Unlock()
	close(cl.done)
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	srv.Shutdown(shut)
	srv.Close()
	wg.Wait()
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// serve handles one request under the fault of the moment.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	for {
		p.mu.Lock()
		f, changed := p.fault, p.changed
		probe := r.URL.Path == p.cfg.HealthPath
		switch f.mode() {
		case Blackhole:
			p.mu.Unlock()
			select { // hold it, answering nothing, until the fault changes or the caller gives up
			case <-changed:
				continue
			case <-r.Context().Done():
				return
			}
		case Refuse, Reset:
			p.mu.Unlock()
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					reset(c)
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		fail := false
		if probe {
			p.stats.Probes++
		} else {
			p.stats.Traffic++
			host := r.Header.Get("X-Forwarded-Host")
			if host == "" {
				host = "-"
			}
			p.stats.LastTraffic[host] = p.cfg.Now()
			if f.ErrorShare > 0 {
				p.served++
				// every 1/share-th request: the count of failures so far is floor(n × share)
				fail = uint64(float64(p.served)*f.ErrorShare) > uint64(float64(p.served-1)*f.ErrorShare)
				if fail {
					p.stats.Injected++
				}
			}
		}
		p.mu.Unlock()
		if probe && f.HealthLoss > 0 && rand.Float64() < f.HealthLoss {
			<-r.Context().Done() // lost: no answer, ever
			return
		}
		if probe && f.HealthFailing {
			http.Error(w, `{"status":"failing","note":"faultproxy"}`, http.StatusServiceUnavailable)
			return
		}
		if !probe && f.Delay > 0 {
			t := time.NewTimer(f.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if fail {
			http.Error(w, `{"error":{"code":"INTERNAL","message":"faultproxy: injected"}}`, http.StatusInternalServerError)
			return
		}
		p.proxy.ServeHTTP(w, r)
		return
	}
}

// reset closes c with a TCP RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// chanListener hands the HTTP server the connections the accept loops let through, across
// the port's closing and opening again.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	addr  net.Addr
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error { return nil }

func (l *chanListener) Addr() net.Addr { return l.addr }

func addrOf(hostport string) net.Addr {
	a, err := net.ResolveTCPAddr("tcp", hostport)
	if err != nil {
		return &net.TCPAddr{}
	}
	return a
}
