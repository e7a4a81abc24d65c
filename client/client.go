// Package client is the typed HTTP client of the MeshFlows servers, shared by the provider
// and discovery SDKs, the gateway, the orchestrator, the dashboard and the bench: a method
// per operation (Register, Heartbeat, Capabilities, Workflows, RunWorkflow…; Invoke and
// Validate on a provider), JSON requests against one of several base URLs with failover to
// the next one on transport errors, 5xx and 429, the error body as *apiv1.Error, and a
// Retry-After as a RetryAfterError. It is public and imports only api/v1.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// DefaultTimeout bounds a request when the caller gives no timeout.
const DefaultTimeout = 5 * time.Second

// maxAnswer bounds the answers read (a discovery answer of a large fleet included).
const maxAnswer = 64 << 20

// Config configures a Client.
type Config struct {
	// Registries are base URLs; the client uses one at a time and moves to the next on
	// transport errors, 5xx and 429.
	Registries []string
	// HTTPClient sends the requests (default: a plain client). TLS is configured on it.
	HTTPClient *http.Client
	// BearerToken, when set, is sent as "Authorization: Bearer …".
	BearerToken string
	// Timeout bounds each call of the typed methods (default DefaultTimeout); a long poll
	// gets its wait on top.
	Timeout time.Duration
	// Now is the clock Retry-After dates are read against (default time.Now).
	Now func() time.Time
}

// Client sends requests to the registry API. It is safe for concurrent use.
type Client struct {
	cfg Config

	mu  sync.Mutex
	cur int // index into cfg.Registries
}

// New returns a Client; every registry URL must be an absolute http(s) URL.
func New(cfg Config) (*Client, error) {
	if len(cfg.Registries) == 0 {
		return nil, errors.New("no registry URL")
	}
	regs := make([]string, len(cfg.Registries))
	for i, r := range cfg.Registries {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("registry URL %q: want http(s)://host:port", r)
		}
		regs[i] = strings.TrimRight(r, "/")
	}
	cfg.Registries = regs
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	// A redirect is an answer, never followed: a provider (or anything on the path) answering
	// 307 to another address must not have a request, its body and its credentials re-sent
	// there — an address nobody registered, possibly any the caller reaches.
	hc := *cfg.HTTPClient
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cfg.HTTPClient = &hc
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Client{cfg: cfg}, nil
}

// actingForKey carries ActingFor's viewer in a context.
type actingForKey struct{}

type actingFor struct {
	viewer string
	admin  bool
}

// ActingFor returns a context whose requests say they act on behalf of viewer (the console
// passing its viewer on; admin: the viewer signed in with the console's admin token). The
// registry takes it only from an identity it was told is the console's.
func ActingFor(ctx context.Context, viewer string, admin bool) context.Context {
	return context.WithValue(ctx, actingForKey{}, actingFor{viewer, admin})
}

// RedirectRefused ends the message of the error a 3xx answer gives: the client never follows
// a redirect.
const RedirectRefused = "redirects are never followed"

// Registry returns the base URL requests go to now.
func (c *Client) Registry() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg.Registries[c.cur]
}

// ErrDecode: a 2xx answer was not the JSON the operation answers.
var ErrDecode = errors.New("the answer is not the expected JSON")

// RetryAfterError is a 429 or 503 answer that said when to try again.
type RetryAfterError struct {
	Err   *apiv1.Error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns the registry's error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// JitteredRetryAfter returns, when err carries a Retry-After, the wait it asks for and up to
// as much again at random (rand returns uniform values in [0, 1)). A registry that sheds
// over its reconnection cap says the time it needs to serve those shed before: a herd shed
// together comes back spread over that time, not at once again.
func JitteredRetryAfter(err error, rand func() float64) (time.Duration, bool) {
	ra, ok := errors.AsType[*RetryAfterError](err)
	if !ok || ra.After <= 0 {
		return 0, false
	}
	return ra.After + time.Duration(rand()*float64(ra.After)), true
}

// Request is one call.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Body is sent when not nil, as JSON unless ContentType says otherwise.
	Body        []byte
	ContentType string
	// Timeout bounds the call (default DefaultTimeout).
	Timeout time.Duration
}

// Do sends r and decodes a 2xx JSON answer into out (when out is not nil). A non-2xx
// answer is an *apiv1.Error (wrapped in a *RetryAfterError when it said Retry-After); a
// transport or decoding failure is an error that is neither.
func (c *Client) Do(ctx context.Context, r Request, out any) error {
	_, _, err := c.exchange(ctx, r, out)
	return err
}

// Raw sends r and returns a 2xx answer's body as it came, undecoded (a load generator that
// only counts entries); errors are Do's.
func (c *Client) Raw(ctx context.Context, r Request) ([]byte, error) {
	_, body, err := c.exchange(ctx, r, nil)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// exchange is Do that also returns the answer's status and body (those of an error answer
// included).
func (c *Client) exchange(ctx context.Context, r Request, out any) (int, []byte, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A request that could not even connect sent nothing: it goes to the next registry at
	// once, each of them once at most, so that the first request of a client whose first
	// registry is down is answered by the next (later ones start there).
	for tries := 1; ; tries++ {
		status, body, err := c.attempt(ctx, c.Registry(), r, out)
		var op *net.OpError
		if err == nil || tries >= len(c.cfg.Registries) || !errors.As(err, &op) || op.Op != "dial" || ctx.Err() != nil {
			return status, body, err
		}
	}
}

// attempt sends r to base once.
func (c *Client) attempt(ctx context.Context, base string, r Request, out any) (int, []byte, error) {
	target, err := joinURL(base, r.Path, r.Query)
	if err != nil {
		return 0, nil, err
	}
	var rd io.Reader
	if r.Body != nil {
		rd = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, rd)
	if err != nil {
		return 0, nil, err
	}
	if r.Body != nil {
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.BearerToken)
	}
	if a, ok := ctx.Value(actingForKey{}).(actingFor); ok && a.viewer != "" {
		req.Header.Set(apiv1.HeaderActingFor, a.viewer)
		if a.admin {
			req.Header.Set(apiv1.HeaderActingAdmin, "true")
		}
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		c.failover(base)
		return 0, nil, fmt.Errorf("%s %s: %w", r.Method, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		c.failover(base)
		return resp.StatusCode, nil, fmt.Errorf("%s %s: read answer: %w", r.Method, target, err)
	}
	if resp.StatusCode/100 == 3 {
		return resp.StatusCode, body, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable,
			"%s %s answered %d redirecting to %q: %s", r.Method, target, resp.StatusCode, resp.Header.Get("Location"), RedirectRefused)
	}
	if resp.StatusCode/100 != 2 {
		ae := apiv1.ErrorFromResponse(resp.StatusCode, body)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			c.failover(base)
			if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), c.cfg.Now()); ok {
				return resp.StatusCode, body, &RetryAfterError{Err: ae, After: d}
			}
		}
		return resp.StatusCode, body, ae
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, body, nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, body, fmt.Errorf("%s %s: %w: %v", r.Method, target, ErrDecode, err)
	}
	return resp.StatusCode, body, nil
}

// failover moves to the registry after base, unless another call moved already.
func (c *Client) failover(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cfg.Registries) > 1 && c.cfg.Registries[c.cur] == base {
		c.cur = (c.cur + 1) % len(c.cfg.Registries)
	}
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// TLSConfig builds the client side of mTLS: the CA bundle that the registry's certificate
// must chain to (caFile; empty uses the system roots) and, when certFile and keyFile are
// given, the client certificate that carries the caller's identity.
func TLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs both the certificate and the key file")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// HTTPClient returns an *http.Client for tlsCfg (nil: plain HTTP) with keep-alive pools
// sized for an agent or a consumer.
func HTTPClient(tlsCfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second, ForceAttemptHTTP2: false,
	}}
}

// joinURL is the URL of path (escaped) under base — a registry's URL, or a provider's
// endpoint with its path prefix — with query as its only query: base's own query and
// fragment never reach the request, whatever base holds.
func joinURL(base, path string, query url.Values) (string, error) {
	if origin(base) { // nearly every base: no path, query or fragment to keep the path from
		target := strings.TrimSuffix(base, "/") + path
		if len(query) > 0 {
			target += "?" + query.Encode()
		}
		return target, nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("base URL %q: %w", base, err)
	}
	u = u.JoinPath(path)
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = query.Encode(), false, "", ""
	return u.String(), nil
}

// origin reports whether base is scheme://host[:port] with at most a trailing "/": no path,
// query, fragment or user info, which joinURL then joins by concatenation.
func origin(base string) bool {
	_, rest, ok := strings.Cut(base, "://")
	if !ok {
		return false
	}
	rest = strings.TrimSuffix(rest, "/")
	return rest != "" && !strings.ContainsAny(rest, "/?#@")
}
