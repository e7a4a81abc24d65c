package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"syscall"
	"time"

	"github.com/meshflows/meshflows/internal/endpoint"
)

// Transport sends requests upstream. A plain-HTTP request without a body whose method may be
// replayed (GET, HEAD, OPTIONS) and that asks no protocol upgrade, which is most of what a
// gateway forwards, is written and its answer read on the calling goroutine over a pooled
// keep-alive connection; every other request goes to an http.Transport. http.Transport hands
// each request to a writing and a reading goroutine of its connection and back; without those
// hand-offs a forwarded GET costs the gateway 12-32 % less CPU (docs/performance-log.md).
//
// On the direct path, as in http.Transport: a pooled connection the upstream closed while it
// was idle, found when the request is written or before any byte of the answer arrives, is
// dropped and the request sent once more on a new connection; the request's context ends the
// wait for the answer and its body; the answer's headers must come within
// ResponseHeaderTimeout; informational answers go to the request's httptrace.ClientTrace
// (ReverseProxy forwards them). A connection goes back to the pool only once its answer's
// body was read to the end, and is checked when taken from it: one that the upstream closed,
// or on which bytes arrived that no request asked for, is closed instead of used.
//
// The zero Transport is usable: it falls back to http.DefaultTransport, dials with a
// net.Dialer, keeps 256 idle connections per upstream for 90 seconds, reads at most 10 MiB
// of headers and waits for them without a bound.
type Transport struct {
	// Fallback sends every request the direct and streamed paths do not (TLS without a
	// streamed body, bodies read whole, upgrades); its TLSClientConfig, when it is an
	// *http.Transport, is also what the streamed path speaks TLS with.
	Fallback http.RoundTripper
	// Dial opens connections to upstreams.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock idle connections are aged by.
	Now func() time.Time
	// MaxIdlePerHost is how many idle connections are kept per upstream address.
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection may wait to be used again; CloseStale
	// closes those that waited longer.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an answer's headers after the request is
	// written.
	ResponseHeaderTimeout time.Duration
	// MaxResponseHeaderBytes bounds the bytes read for an answer's headers, informational
	// answers included (default 10 MiB, as http.Transport's).
	MaxResponseHeaderBytes int64

	mu   sync.Mutex
	idle map[string][]*upstreamConn // by upstream address; an address left without any goes at the next CloseStale
}

// The defaults of a Transport's pool and bounds, which its fallback shares.
const (
	defaultMaxIdlePerHost = 256
	defaultIdleTimeout    = 90 * time.Second
	defaultMaxHeaderBytes = 10 << 20 // http.Transport's
	defaultHeaderTimeout  = 30 * time.Second
)

// NewTransport returns the upstream transport: keep-alive pools sized for a gateway and
// timeouts on everything but the response body.
func NewTransport() *Transport { return NewTransportFor(endpoint.Policy{}, 0) }

// NewTransportFor is NewTransport connecting only to addresses policy admits (a name that
// resolves to a link-local or metadata address is refused as its literal would be) and
// waiting headerTimeout at most for an answer's headers once the request is written (0: 30 s).
func NewTransportFor(policy endpoint.Policy, headerTimeout time.Duration) *Transport {
	headerTimeout = or(headerTimeout, defaultHeaderTimeout)
	dial := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: policy.Control}).DialContext
	return &Transport{
		Fallback: &http.Transport{
			Proxy:                 nil,
			DialContext:           dial,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   defaultMaxIdlePerHost,
			IdleConnTimeout:       defaultIdleTimeout,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: headerTimeout,
			ExpectContinueTimeout: time.Second,
		},
		Dial:                  dial,
		ResponseHeaderTimeout: headerTimeout,
	}
}

// direct reports whether req goes by the direct path. Its header names and values are not
// checked again, as http.Transport does: the gateway's server already refused a request
// with an invalid one, and Request.Write writes a line break inside a value as a space.
func direct(req *http.Request) bool {
	if !directPath || req.URL.Scheme != "http" || req.URL.Host == "" || (req.Body != nil && req.Body != http.NoBody) || req.Close {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	_, upgrade := req.Header["Upgrade"]
	_, expect := req.Header["Expect"]
	return !upgrade && !expect
}

// streamed reports whether req goes by the streamed path: a plain-HTTP or https request
// whose body the gateway did not read whole (it cannot be sent again: no GetBody) and that
// asks no protocol upgrade.
func streamed(req *http.Request) bool {
	if (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" || req.Body == nil || req.Body == http.NoBody || req.GetBody != nil {
		return false
	}
	_, upgrade := req.Header["Upgrade"]
	return !upgrade
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if streamed(req) {
		return t.roundTripStreamed(req)
	}
	if !direct(req) {
		if t.Fallback == nil {
			return http.DefaultTransport.RoundTrip(req)
		}
		return t.Fallback.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	for {
		c, reused, err := t.conn(ctx, addr)
		if err != nil {
			return nil, err
		}
		resp, stop, err := c.roundTrip(ctx, req, t.ResponseHeaderTimeout, t.maxHeaderBytes())
		if err == nil {
			resp.Body = &connBody{ReadCloser: resp.Body, t: t, c: c, addr: addr, stop: stop,
				keep: !resp.Close && resp.ProtoAtLeast(1, 1), eof: resp.Body == http.NoBody}
			return resp, nil
		}
		c.nc.Close()
		if !reused || !errors.Is(err, errNoAnswer) || ctx.Err() != nil {
			return nil, err
		}
		// The upstream closed the connection while it sat idle: a new one, as http.Transport
		// retries a replayable request that got no answer on a reused connection.
	}
}

// CloseIdleConnections closes the connections the pools hold, of both paths.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
	if f, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

func (t *Transport) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

var defaultDialer net.Dialer

// conn takes an idle connection to addr from the pool, or dials one.
func (t *Transport) conn(ctx context.Context, addr string) (*upstreamConn, bool, error) {
	now := t.now()
	idleTimeout := t.idleTimeout()
	for {
		t.mu.Lock()
		cs := t.idle[addr]
		var c *upstreamConn
		if n := len(cs); n > 0 {
			c = cs[n-1]
			cs[n-1] = nil
			t.idle[addr] = cs[:n-1]
		}
		t.mu.Unlock()
		if c == nil {
			break
		}
		if now.Sub(c.idleSince) < idleTimeout && c.usable() {
			return c, true, nil
		}
		c.nc.Close()
	}
	dial := t.Dial
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := &upstreamConn{nc: nc, bw: bufio.NewWriterSize(nc, 4096)}
	c.limit.r = nc
	c.br = bufio.NewReaderSize(&c.limit, 4096)
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.peek = newPeeker(raw)
		}
	}
	return c, false, nil
}

// put returns c to the pool of addr, or closes it when the pool is full.
func (t *Transport) put(addr string, c *upstreamConn) {
	c.idleSince = t.now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*upstreamConn{}
	}
	cs := t.idle[addr]
	if len(cs) < or(t.MaxIdlePerHost, defaultMaxIdlePerHost) {
		t.idle[addr] = append(cs, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// CloseStale closes the pooled connections idle for longer than IdleTimeout, and forgets the
// upstream addresses left without any: upstreams come and go, and the connections to one
// that went would otherwise stay open. The gateway calls it every PolicyCheck. (A connection
// idle too long is never used, called or not: conn closes it when it takes it.)
func (t *Transport) CloseStale() {
	t.mu.Lock()
	stale := t.expireLocked(t.now())
	t.mu.Unlock()
	for _, c := range stale {
		c.nc.Close()
	}
}

// expireLocked takes out of the pools the connections idle for longer than IdleTimeout at
// now, and the entries of addresses left without any, and returns the connections.
func (t *Transport) expireLocked(now time.Time) []*upstreamConn {
	var stale []*upstreamConn
	timeout := t.idleTimeout()
	for addr, cs := range t.idle {
		kept := cs[:0]
		for _, c := range cs {
			if now.Sub(c.idleSince) < timeout {
				kept = append(kept, c)
			} else {
				stale = append(stale, c)
			}
		}
		clear(cs[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = kept
		}
	}
	return stale
}

func (t *Transport) idleTimeout() time.Duration { return or(t.IdleTimeout, defaultIdleTimeout) }

// or is v, or def when v is not positive (a field left to its default).
func or[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// errHeaderTimeout is the direct path's http.Transport timeout awaiting response headers: a
// net.Error whose Timeout is true, so that the gateway answers 504.
var errHeaderTimeout error = headerTimeoutError{}

type headerTimeoutError struct{}

func (headerTimeoutError) Error() string   { return "net/http: timeout awaiting response headers" }
func (headerTimeoutError) Timeout() bool   { return true }
func (headerTimeoutError) Temporary() bool { return true }

// errNoAnswer marks a request that failed before any byte of an answer came back: on a
// pooled connection, the upstream most likely closed it while it sat idle.
var errNoAnswer = errors.New("no answer from the upstream")

// upstreamConn is one keep-alive connection of the direct path.
type upstreamConn struct {
	nc        net.Conn
	peek      *peeker       // nil when nc is not a socket
	limit     limitedReader // under br: bounds what an answer's headers may take
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
}

// roundTrip writes req and reads the headers of its answer, handing informational ones to
// the request's trace. Until stop is called, the end of ctx sets the connection's deadline in
// the past, which ends any read or write on it.
func (c *upstreamConn) roundTrip(ctx context.Context, req *http.Request, headerTimeout time.Duration, maxHeader int64) (resp *http.Response, stop func() bool, err error) {
	stop = context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, func() bool, error) {
		stop()
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("upstream request: %w", ctx.Err())
		}
		return nil, nil, err
	}
	if err := req.Write(c.bw); err != nil {
		return fail(fmt.Errorf("%w: %w", errNoAnswer, err))
	}
	if err := c.bw.Flush(); err != nil {
		return fail(fmt.Errorf("%w: %w", errNoAnswer, err))
	}
	if headerTimeout > 0 {
		c.nc.SetReadDeadline(time.Now().Add(headerTimeout))
	}
	c.limit.n = maxHeader
	if _, err := c.br.Peek(1); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
			return fail(errHeaderTimeout)
		}
		return fail(fmt.Errorf("%w: %w", errNoAnswer, err))
	}
	for {
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return fail(fmt.Errorf("read the upstream's answer: %w", err))
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			c.limit.n = math.MaxInt64
			if headerTimeout > 0 {
				c.nc.SetReadDeadline(time.Time{})
			}
			return resp, stop, nil
		}
		// An informational answer goes to the request's trace, as http.Transport hands it:
		// ReverseProxy forwards it to the client (103 Early Hints). Delivered there, its bytes
		// no longer count against the bound on headers.
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
			c.limit.n = maxHeader
		}
	}
}

// limitedReader reads from r until n bytes were read, then fails.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errHeadersTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

var errHeadersTooLarge = errors.New("the answer's headers are too large")

func (t *Transport) maxHeaderBytes() int64 {
	return or(t.MaxResponseHeaderBytes, defaultMaxHeaderBytes)
}

// usable reports whether a pooled connection may carry a request: the upstream has not
// closed it and sent nothing unasked. It peeks at the socket without waiting; a connection
// that cannot be peeked at (not a socket) is never used twice.
func (c *upstreamConn) usable() bool {
	return c.br.Buffered() == 0 && c.peek != nil && c.peek.quiet()
}

// connBody is the body of an answer on the direct path. Read to its end, it gives its
// connection back to the pool; closed before, it closes the connection.
type connBody struct {
	io.ReadCloser
	t      *Transport
	c      *upstreamConn
	addr   string
	stop   func() bool
	keep   bool // the answer lets the connection carry another request
	eof    bool
	closed bool
}

func (b *connBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close ends the body: the connection goes back to the pool when the body was read to its
// end, the answer allows it and the request's context did not end it.
func (b *connBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.ReadCloser.Close()
	if b.stop() && b.eof && b.keep && err == nil {
		b.t.put(b.addr, b.c)
	} else {
		b.c.nc.Close()
	}
	return err
}

// roundTripStreamed sends a request with a streamed body on a connection of its own (closed
// after the answer) and reads the answer while the body is written. An upstream that answers
// before the body ended — a 413 after the part it takes, then a close — so gets its answer
// through: http.Transport reports the reset of the unfinished write instead, a 502. A body
// that fails to arrive (past the route's limit, or too slow) ends the request with its
// error, whatever the upstream did meanwhile. An https upstream is spoken to in HTTP/1.1
// over TLS with the Fallback's TLS configuration (when it is an *http.Transport), as the
// Fallback would.
func (t *Transport) roundTripStreamed(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(req.URL.Hostname(), port)
	}
	dial := t.Dial
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		req.Body.Close()
		return nil, err
	}
	if req.URL.Scheme == "https" {
		if nc, err = t.handshake(ctx, nc, req.URL.Hostname()); err != nil {
			req.Body.Close()
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	body := &watchedBody{ReadCloser: req.Body}
	out := req.WithContext(ctx)
	out.Body, out.Close = body, true // one request on this connection
	written := make(chan error, 1)
	go func() { // owned by this round trip: the answer's body waits for it when closed
		bw := bufio.NewWriterSize(nc, 32<<10)
		err := out.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		if body.failed() != nil {
			nc.Close() // the client's body failed: no answer is wanted, and none may come
		}
		written <- err
	}()
	lr := &limitedReader{r: nc, n: t.maxHeaderBytes()}
	br := bufio.NewReaderSize(lr, 4096)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, out)
		if err != nil || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
			if err = trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
				break
			}
		}
		lr.n = t.maxHeaderBytes()
	}
	if err != nil {
		nc.Close()
		werr := <-written
		stop()
		switch {
		case body.failed() != nil:
			return nil, body.failed()
		case ctx.Err() != nil:
			return nil, fmt.Errorf("upstream request: %w", ctx.Err())
		case werr != nil:
			return nil, fmt.Errorf("write the request upstream: %w", werr)
		}
		return nil, fmt.Errorf("read the upstream's answer: %w", err)
	}
	lr.n = math.MaxInt64
	resp.Body = &streamedAnswer{ReadCloser: resp.Body, nc: nc, written: written, stop: stop}
	return resp, nil
}

// handshake starts TLS on a connection to an https upstream, as the Fallback would: its TLS
// configuration (the system's roots without one), the upstream's name, HTTP/1.1, and its
// handshake timeout (10 s without one). It closes nc when the handshake fails.
func (t *Transport) handshake(ctx context.Context, nc net.Conn, host string) (net.Conn, error) {
	cfg, timeout := &tls.Config{}, 10*time.Second
	if ft, ok := t.Fallback.(*http.Transport); ok {
		if ft.TLSClientConfig != nil {
			cfg = ft.TLSClientConfig.Clone()
		}
		timeout = or(ft.TLSHandshakeTimeout, timeout)
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"} // the request is written as HTTP/1.1
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS handshake with the upstream: %w", err)
	}
	return tc, nil
}

// watchedBody is a streamed request body that remembers why a read of it failed.
type watchedBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}
	return n, err
}

func (b *watchedBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// streamedAnswer is the body of an answer on the streamed path: closing it closes the
// connection and waits for the request's writer, which then ends (its reads of the client's
// body are bounded by the gateway's body timeout).
type streamedAnswer struct {
	io.ReadCloser
	nc      net.Conn
	written chan error
	stop    func() bool
	closed  bool
}

func (b *streamedAnswer) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.ReadCloser.Close()
	b.nc.Close()
	<-b.written
	b.stop()
	return err
}
