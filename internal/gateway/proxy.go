package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/routing"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// proxy forwards requests with httputil.ReverseProxy over a retrying transport.
// DefaultMaxBodyBytes is the gateway's --max-body-bytes: the largest request body of a
// route whose manifest declares no capabilities.max_body_bytes.
const DefaultMaxBodyBytes = 10 << 20

type proxy struct {
	rp          *httputil.ReverseProxy
	maxBody     int64 // the default limit of a request body (a route may declare its own)
	maxBuffered int64
	bodyTimeout time.Duration
	metrics     *metrics
	now         func() time.Time
	// tracer is nil when tracing is off: then no span, no header, no allocation
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	failures   failureReports // traced requests that failed, for the journal
}

type targetKey struct{}

// target is where one request goes: the upstreams to try, in order, and the cleaned path.
type target struct {
	upstreams [2]*url.URL // the chosen instance and the one a retry goes to
	tallies   [2]*tally   // their outcome counters (nil for static upstreams)
	served    int         // which of the two the answer came from
	instances [2]string   // their instance ids ("" for static upstreams)
	sent      time.Time   // when the request went to it
	path      string
	retry     bool // more than one upstream, and a body that can be sent again
	declared  bool // the body limit is the route's own (max_body_bytes), not the gateway's
	source    string
	route     *routeStat
	traced    *traced // the request's spans; nil when tracing is off
}

// outcome counts the answer of upstream i: a connect failure, an error (no answer, or a
// 5xx) or ok, with the time it took since the request went.
func (t *target) outcome(i int, connect, failed bool) {
	if c := t.tallies[i]; c != nil {
		c.Record(connect, failed, time.Since(t.sent))
	}
}

func newProxy(rt http.RoundTripper, maxBuffered int64, bodyTimeout time.Duration, m *metrics, logger *slog.Logger, now func() time.Time) *proxy {
	p := &proxy{maxBuffered: maxBuffered, bodyTimeout: bodyTimeout, metrics: m, now: now}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*target)
			pr.SetURL(t.upstreams[0])
			pr.Out.URL.Path, pr.Out.URL.RawPath = upstreamPath(t.upstreams[0], t.path)
			pr.SetXForwarded()
		},
		Transport:  &retrying{next: rt, metrics: m, proxy: p},
		BufferPool: bufferPool{},
		// Zero: responses of unknown length and event streams are still flushed at once by
		// ReverseProxy; others are written in as few calls as possible.
		FlushInterval: 0,
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if t, ok := r.Context().Value(targetKey{}).(*target); ok {
				t.outcome(t.served, connectFailure(err), true)
			}
			if d := DeclineFrom(r.Context()); d != nil && connectFailure(err) && (r.Body == nil || r.Body == http.NoBody || r.GetBody != nil) {
				// nothing was sent and the body can be sent again: the caller takes it elsewhere
				d.Declined, d.Body, d.Err = true, r.GetBody, err
				return
			}
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) { // the client's body passed the route's limit while it streamed
				t, _ := r.Context().Value(targetKey{}).(*target)
				if t != nil {
					p.metrics.count(t.source, http.StatusRequestEntityTooLarge)
					t.route.record(p.now(), http.StatusRequestEntityTooLarge)
				}
				httpapi.WriteError(w, tooLarge(mbe.Limit, t != nil && t.declared))
				return
			}
			status := http.StatusBadGateway
			var ne net.Error
			if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
				status = http.StatusGatewayTimeout // no answer in time: an upstream that accepted and never answered
			}
			if t, ok := r.Context().Value(targetKey{}).(*target); ok {
				t.route.record(p.now(), status)
			}
			httpapi.WriteError(w, apiv1.Errorf(status, apiv1.CodeUnavailable, "upstream failed: %v", err))
		},
		ModifyResponse: func(resp *http.Response) error {
			t := resp.Request.Context().Value(targetKey{}).(*target)
			if named := resp.Header.Get(InstanceHeader); named != "" && t.instances[t.served] != "" && named != t.instances[t.served] {
				// another process answers at the instance's address (a zombie registration):
				// its answer is not the instance's, whatever it says (502, counted as failed)
				m.impostors.Inc()
				return fmt.Errorf("the upstream at %s answered as instance %q, not %q: another process took its address", t.upstreams[t.served].Host, named, t.instances[t.served])
			}
			m.count(t.source, resp.StatusCode)
			t.outcome(t.served, false, resp.StatusCode >= 500)
			t.route.record(p.now(), resp.StatusCode)
			return nil
		},
	}
	return p
}

// InstanceHeader is the response header an upstream may name its instance in. An answer
// that names another instance than the one the gateway sent the request to is refused with
// 502: another process took the instance's address.
const InstanceHeader = "X-Instance"

// upstreamPath is where a request for p (decoded, as routing matched it) goes on upstream
// u: p under u's path prefix, joined by url.JoinPath (never by concatenation), as a path and
// its escaped form.
func upstreamPath(u *url.URL, p string) (path, rawPath string) {
	if u.Path == "" || u.Path == "/" {
		return p, "" // no prefix (nearly every endpoint): the cleaned request path as it is, at no cost per request
	}
	j := u.JoinPath((&url.URL{Path: p}).EscapedPath())
	if !strings.HasPrefix(j.Path, "/") { // an origin without a path: JoinPath leaves the path relative
		j.Path = "/" + j.Path
		if j.RawPath != "" {
			j.RawPath = "/" + j.RawPath
		}
	}
	return j.Path, j.RawPath
}

// serve proxies r to the route of m, to the upstream the balancer picks.
func (p *proxy) serve(w http.ResponseWriter, r *http.Request, m routing.Match, sv *serving) {
	e := m.Entry
	t := &target{path: m.Path, source: e.Source, route: sv.health}
	if e.Rewrite != "" {
		t.path = e.Rewrite
	}
	n := len(sv.upstreams)
	first, second := sv.pick()
	a, b := &sv.upstreams[first], &sv.upstreams[second]
	t.upstreams, t.tallies = [2]*url.URL{a.url, b.url}, [2]*tally{a.tally, b.tally}
	t.instances = [2]string{a.instance, b.instance}
	if p.tracer != nil {
		r = p.startServerSpan(w, r, e, t, a, b)
		defer t.traced.end()
	}
	// A connect failure (the only one retried) sent nothing: another upstream may take the
	// request whatever its method, as long as its body can be sent again.
	t.retry = n > 1
	limit := p.maxBody
	if e.MaxBodyBytes > 0 {
		limit, t.declared = e.MaxBodyBytes, true
	}
	if r.ContentLength > limit {
		p.metrics.count(e.Source, http.StatusRequestEntityTooLarge)
		sv.health.record(p.now(), http.StatusRequestEntityTooLarge)
		w.Header().Set("Connection", "close") // the rest of the body is not read
		httpapi.WriteError(w, tooLarge(limit, t.declared))
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	if r.Body != nil && r.Body != http.NoBody && e.Streaming {
		// The service reads as the body comes: forward it so, with no first read of a
		// small one whole (and so no retry on another upstream).
		r.Body = &idleBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: p.bodyTimeout, deadline: true}
		t.retry = false
	} else if r.Body != nil && r.Body != http.NoBody {
		buffered, err := p.readBody(w, r, t.declared)
		if err != nil {
			p.metrics.count(e.Source, err.Status)
			sv.health.record(p.now(), err.Status)
			httpapi.WriteError(w, err)
			return
		}
		t.retry = t.retry && buffered
	}
	begin := time.Now()
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, t)))
	p.metrics.observe(e.Source, time.Since(begin))
}

// tooLarge is the 413 of a request body over limit, naming where the limit comes from.
func tooLarge(limit int64, declared bool) *apiv1.Error {
	from := "the gateway's --max-body-bytes"
	if declared {
		from = "its service's max_body_bytes"
	}
	return apiv1.Errorf(http.StatusRequestEntityTooLarge, apiv1.CodePayloadTooLarge,
		"the request body is over %d bytes, the most this route takes (%s)", limit, from)
}

// readBody reads r's body before anything goes upstream when it is at most maxBuffered
// bytes, within bodyTimeout (a slow client then holds no upstream connection); it replaces
// r.Body (and sets GetBody, for a retry) and reports whether it buffered the whole body. A
// larger body is streamed after the part already read, each read bounded by bodyTimeout.
func (p *proxy) readBody(w http.ResponseWriter, r *http.Request, declared bool) (bool, *apiv1.Error) {
	rc := http.NewResponseController(w)
	if r.ContentLength > p.maxBuffered {
		b := &idleBody{ReadCloser: r.Body, rc: rc, timeout: p.bodyTimeout, deadline: true}
		r.Body = b
		return false, nil
	}
	deadline := rc.SetReadDeadline(time.Now().Add(p.bodyTimeout)) == nil
	head, err := io.ReadAll(io.LimitReader(r.Body, p.maxBuffered+1))
	var ne net.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		w.Header().Set("Connection", "close")
		return false, apiv1.Errorf(http.StatusRequestTimeout, apiv1.CodeRequestTimeout, "the request body did not arrive within %s", p.bodyTimeout)
	case errors.As(err, &mbe):
		return false, tooLarge(mbe.Limit, declared)
	case err != nil:
		return false, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "could not read the request body: %v", err)
	}
	if int64(len(head)) <= p.maxBuffered {
		if deadline {
			rc.SetReadDeadline(time.Time{}) // the server's background read must not time out while the response streams
		}
		r.Body = io.NopCloser(bytes.NewReader(head))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(head)), nil }
		r.ContentLength = int64(len(head))
		return true, nil
	}
	rest := &idleBody{ReadCloser: r.Body, rc: rc, timeout: p.bodyTimeout, deadline: deadline}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rest), rest}
	return false, nil
}

// idleBody is the rest of a streamed request body: each read may wait at most timeout for
// bytes, and the deadline is cleared once the body ends.
type idleBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	timeout  time.Duration
	deadline bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.deadline {
		b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.deadline {
		b.rc.SetReadDeadline(time.Time{})
		b.deadline = false
	}
	return n, err
}

// retrying sends a request to its first upstream and, when that fails to connect (nothing
// was sent, so any method may go again), once more to the next one.
type retrying struct {
	next    http.RoundTripper
	metrics *metrics
	proxy   *proxy
}

func (rt *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	t, _ := req.Context().Value(targetKey{}).(*target)
	retry := t != nil && t.retry
	var body func() (io.ReadCloser, error)
	if retry {
		body = req.GetBody
		if req.Body != nil && req.Body != http.NoBody && body == nil {
			retry = false
		}
	}
	if t != nil {
		t.sent = time.Now()
	}
	resp, err := rt.attempt(req, t, 0)
	if err == nil || !retry || !connectFailure(err) || req.Context().Err() != nil {
		return resp, err
	}
	rt.metrics.retries.Inc()
	if t.traced != nil {
		t.traced.retries++
	}
	t.outcome(0, true, true)
	t.served, t.sent = 1, time.Now()
	again := req.Clone(req.Context())
	next := t.upstreams[1]
	again.URL.Scheme, again.URL.Host, again.Host = next.Scheme, next.Host, ""
	again.URL.Path, again.URL.RawPath = upstreamPath(next, t.path)
	if body != nil {
		if again.Body, err = body(); err != nil {
			return nil, err
		}
	}
	return rt.attempt(again, t, 1)
}

// attempt sends req to upstream i of t, in a client span of its own when tracing is on.
func (rt *retrying) attempt(req *http.Request, t *target, i int) (*http.Response, error) {
	if t == nil || t.traced == nil {
		return rt.next.RoundTrip(req)
	}
	return rt.proxy.tracedAttempt(rt.next, req, t, i)
}

// connectFailure reports an error that happened before the request reached the upstream.
func connectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// bufferPool reuses the 32 KiB buffers ReverseProxy copies bodies through; without it each
// request allocates one.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
