package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/gateway"
)

// rawUpstream accepts connections on loopback and hands the n-th (from 0) to serve, which
// owns it; it returns the address.
func rawUpstream(t testing.TB, serve func(n int, c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(n, c)
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// readRequest reads one request's head from br (the direct path sends no bodies).
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	return req.Body.Close()
}

// counted is a Transport whose dials are counted.
func counted() (*gateway.Transport, *atomic.Int32) {
	var dials atomic.Int32
	var d net.Dialer
	tr := &gateway.Transport{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	return tr, &dials
}

// get sends a GET (or method) for url through tr and returns the answer's body.
func get(t *testing.T, tr http.RoundTripper, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, url, err)
	}
	resp.Body.Close()
	return resp, string(b)
}

func TestTransportReusesConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			io.WriteString(w, "ok")
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "part one, ")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part two")
			w.Header().Set("X-Sum", "2")
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/same":
			w.WriteHeader(http.StatusNotModified)
		}
	}))
	defer srv.Close()
	tests := []struct {
		name, method, path, body string
		status                   int
		trailer                  string
	}{
		{name: "content length", method: "GET", path: "/length", body: "ok", status: 200},
		{name: "chunked with a trailer", method: "GET", path: "/chunked", body: "part one, part two", status: 200, trailer: "2"},
		{name: "head", method: "HEAD", path: "/length", status: 200},
		{name: "options", method: "OPTIONS", path: "/length", body: "ok", status: 200},
		{name: "no content", method: "GET", path: "/none", status: 204},
		{name: "not modified", method: "GET", path: "/same", status: 304},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, dials := counted()
			defer tr.CloseIdleConnections()
			for i := range 3 {
				resp, body := get(t, tr, tt.method, srv.URL+tt.path)
				if resp.StatusCode != tt.status || body != tt.body || resp.Trailer.Get("X-Sum") != tt.trailer {
					t.Fatalf("answer %d: %d %q (trailer %q), want %d %q (trailer %q)", i, resp.StatusCode, body, resp.Trailer.Get("X-Sum"), tt.status, tt.body, tt.trailer)
				}
			}
			if n := dials.Load(); n != 1 {
				t.Errorf("%d dials for three requests in turn, want 1", n)
			}
		})
	}
}

func TestTransportClosesWhatItCannotReuse(t *testing.T) {
	big := strings.Repeat("x", 1<<16)
	tests := []struct {
		name   string
		answer string // what the upstream writes to each request
		read   int    // bytes of the body read before closing it; -1 for all
	}{
		{name: "body closed before its end", answer: "HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + big, read: 1},
		{name: "connection close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", read: -1},
		{name: "HTTP/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", read: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawUpstream(t, func(_ int, c net.Conn) {
				br := bufio.NewReader(c)
				for readRequest(br) == nil {
					if _, err := io.WriteString(c, tt.answer); err != nil {
						return
					}
				}
			})
			tr, dials := counted()
			defer tr.CloseIdleConnections()
			for range 2 {
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if tt.read < 0 {
					io.Copy(io.Discard, resp.Body)
				} else {
					io.CopyN(io.Discard, resp.Body, int64(tt.read))
				}
				resp.Body.Close()
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials for two requests, want 2 (the first connection may not be reused)", n)
			}
		})
	}
}

func TestTransportNeverAnswersWithUnaskedBytes(t *testing.T) {
	const poison = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison"
	tests := []struct {
		name     string
		separate bool // the unasked answer is written after the asked one, not with it
		idle     bool // the upstream closes the connection after its answer
	}{
		{name: "in the same write"},
		{name: "after the answer", separate: true},
		{name: "closed while idle", idle: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read, written := make(chan struct{}), make(chan struct{})
			addr := rawUpstream(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				if n > 0 {
					for readRequest(br) == nil {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
					}
					return
				}
				if readRequest(br) != nil {
					return
				}
				switch answer := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"; {
				case tt.idle:
					io.WriteString(c, answer)
					<-read
					c.Close()
				case tt.separate:
					io.WriteString(c, answer)
					<-read // the answer was read whole: what follows waits in the socket
					io.WriteString(c, poison)
				default:
					io.WriteString(c, answer+poison)
				}
				close(written)
				io.Copy(io.Discard, c)
			})
			tr, dials := counted()
			defer tr.CloseIdleConnections()
			_, body := get(t, tr, "GET", "http://"+addr+"/")
			close(read)
			if body != "ok" {
				t.Fatalf("first answer %q, want ok", body)
			}
			<-written
			if _, body := get(t, tr, "GET", "http://"+addr+"/"); body != "fresh" {
				t.Fatalf("second answer %q, want fresh (from a new connection)", body)
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials, want 2", n)
			}
		})
	}
}

func TestTransportRetriesOnlyAReusedConnection(t *testing.T) {
	tests := []struct {
		name  string
		first int // answers on the first connection before it is closed on a request
		want  string
		dials int32
	}{
		{name: "reused connection closed on the request", first: 1, want: "fresh", dials: 2},
		{name: "new connection closed on the request", first: 0, dials: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawUpstream(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for i := 0; readRequest(br) == nil; i++ {
					if n == 0 && i == tt.first {
						return // read the request, closed without an answer
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
				}
			})
			tr, dials := counted()
			defer tr.CloseIdleConnections()
			for range tt.first {
				get(t, tr, "GET", "http://"+addr+"/")
			}
			req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
			resp, err := tr.RoundTrip(req)
			switch {
			case tt.want == "" && err == nil:
				resp.Body.Close()
				t.Fatal("an answer, want an error: a request is sent once more only after a reused connection failed")
			case tt.want != "" && err != nil:
				t.Fatal(err)
			case err == nil:
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != tt.want {
					t.Errorf("answer %q, want %q", b, tt.want)
				}
			}
			if n := dials.Load(); n != tt.dials {
				t.Errorf("%d dials, want %d", n, tt.dials)
			}
		})
	}
}

func TestTransportAgesIdleConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, dials := counted()
	defer tr.CloseIdleConnections()
	now := time.Unix(1_000_000, 0)
	tr.Now = func() time.Time { return now }
	tr.IdleTimeout = time.Minute
	get(t, tr, "GET", srv.URL)
	now = now.Add(59 * time.Second)
	get(t, tr, "GET", srv.URL)
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials after 59 s idle, want 1", n)
	}
	now = now.Add(time.Minute)
	get(t, tr, "GET", srv.URL)
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials after a minute idle, want 2", n)
	}
}

func TestTransportClosesStaleConnections(t *testing.T) {
	// closed reports, per upstream, each connection its server saw closed
	closed := make(chan string, 4)
	upstream := func(name string) *httptest.Server {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- name
			}
		}
		s.Start()
		t.Cleanup(s.Close)
		return s
	}
	gone, recent := upstream("gone"), upstream("recent")
	tr, _ := counted()
	defer tr.CloseIdleConnections()
	now := time.Unix(1_000_000, 0)
	tr.Now = func() time.Time { return now }
	tr.IdleTimeout = time.Minute
	get(t, tr, "GET", gone.URL) // pooled, and never asked for again
	now = now.Add(2 * time.Minute)
	get(t, tr, "GET", recent.URL) // pooled now: not stale
	tr.CloseStale()
	select {
	case name := <-closed:
		if name != "gone" {
			t.Fatalf("the connection to %s closed, want the one idle to gone", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection idle for two minutes is still open")
	}
	select {
	case name := <-closed:
		t.Errorf("the connection to %s closed too", name)
	default:
	}
}

func TestTransportBoundsItsPool(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr, dials := counted()
	defer tr.CloseIdleConnections()
	tr.MaxIdlePerHost = 1
	open := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	finish := func(resp *http.Response) { io.Copy(io.Discard, resp.Body); resp.Body.Close() }
	a, b := open(), open() // two at once: two connections
	finish(a)
	finish(b) // the pool keeps one of them
	c, d := open(), open()
	finish(c)
	finish(d)
	if n := dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3: two, then one kept and one new", n)
	}
}

func TestTransportEndsWithTheRequestsContext(t *testing.T) {
	tests := []struct {
		name   string
		answer string // written before the upstream stalls
	}{
		{name: "waiting for the headers"},
		{name: "reading the body", answer: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release, got := make(chan struct{}), make(chan struct{})
			defer close(release)
			addr := rawUpstream(t, func(_ int, c net.Conn) {
				readRequest(bufio.NewReader(c))
				io.WriteString(c, tt.answer)
				close(got)
				<-release
			})
			tr, _ := counted()
			defer tr.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
			if tt.answer == "" {
				go func() { <-got; cancel() }() // the request is out: the transport waits for the answer
				_, err := tr.RoundTrip(req)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error %v, want context.Canceled", err)
				}
				return
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			cancel()
			if _, err := resp.Body.Read(buf); err == nil {
				t.Fatal("the body went on after the request's context ended")
			}
		})
	}
}

func TestTransportBoundsTheWaitForHeaders(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := rawUpstream(t, func(_ int, c net.Conn) {
		readRequest(bufio.NewReader(c))
		<-release
	})
	tr, _ := counted()
	tr.ResponseHeaderTimeout = 20 * time.Millisecond
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	_, err := tr.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("error %v, want a timeout awaiting response headers", err)
	}
}

func TestTransportBoundsTheHeaders(t *testing.T) {
	pad := strings.Repeat("X-Pad: "+strings.Repeat("x", 90)+"\r\n", 700) // 68,600 bytes
	hints := strings.Repeat("HTTP/1.1 103 Early Hints\r\n"+pad[:99*300]+"\r\n", 3) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	tests := []struct {
		name    string
		answer  string
		max     int64
		trace   bool // the request carries a trace that takes informational answers
		wantErr string
	}{
		{name: "within the bound", answer: "HTTP/1.1 200 OK\r\n" + pad + "Content-Length: 2\r\n\r\nok", max: 1 << 20},
		{name: "over it", answer: "HTTP/1.1 200 OK\r\n" + pad + "Content-Length: 2\r\n\r\nok", max: 64 << 10, wantErr: "too large"},
		{name: "informational answers count", answer: hints, max: 64 << 10, wantErr: "too large"},
		{name: "unless a trace took them", answer: hints, max: 64 << 10, trace: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawUpstream(t, func(_ int, c net.Conn) {
				if readRequest(bufio.NewReader(c)) == nil {
					io.WriteString(c, tt.answer)
				}
			})
			tr, _ := counted()
			tr.MaxResponseHeaderBytes = tt.max
			defer tr.CloseIdleConnections()
			ctx := context.Background()
			if tt.trace {
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { return nil }})
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if tt.wantErr != "" || string(b) != "ok" {
					t.Fatalf("answer %q, want error %q", b, tt.wantErr)
				}
				return
			}
			if tt.wantErr == "" || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestTransportHandsInformationalAnswersToTheTrace(t *testing.T) {
	addr := rawUpstream(t, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		for readRequest(br) == nil {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr, dials := counted()
	defer tr.CloseIdleConnections()
	for _, traced := range []bool{true, false} {
		var got []string
		ctx := context.Background()
		if traced {
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got = append(got, fmt.Sprintf("%d %s", code, h.Get("Link")))
				return nil
			}})
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("answer %d %q, want 200 ok", resp.StatusCode, b)
		}
		if want := map[bool][]string{true: {"103 </style.css>; rel=preload"}}[traced]; !slices.Equal(got, want) {
			t.Errorf("traced %v: the trace got %q, want %q", traced, got, want)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}
}

// recorder counts the requests it passes on.
type recorder struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return r.next.RoundTrip(req)
}

func TestTransportFallsBack(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
	plain := httptest.NewServer(echo)
	defer plain.Close()
	secure := httptest.NewTLSServer(echo)
	defer secure.Close()
	tests := []struct {
		name  string
		req   func() *http.Request
		dials int32 // on the direct path
	}{
		{name: "a body", req: func() *http.Request {
			r, _ := http.NewRequest("POST", plain.URL, strings.NewReader("sent"))
			return r
		}},
		{name: "a method not replayed", req: func() *http.Request { r, _ := http.NewRequest("DELETE", plain.URL, nil); return r }},
		{name: "TLS", req: func() *http.Request { r, _ := http.NewRequest("GET", secure.URL, nil); return r }},
		{name: "an upgrade", req: func() *http.Request {
			r, _ := http.NewRequest("GET", plain.URL, nil)
			r.Header.Set("Upgrade", "websocket")
			return r
		}},
		{name: "connection close", req: func() *http.Request { r, _ := http.NewRequest("GET", plain.URL, nil); r.Close = true; return r }},
		{name: "a plain GET", req: func() *http.Request { r, _ := http.NewRequest("GET", plain.URL, nil); return r }, dials: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fallback := secure.Client().Transport.(*http.Transport).Clone()
			defer fallback.CloseIdleConnections()
			rec := &recorder{next: fallback}
			tr, dials := counted()
			tr.Fallback = rec
			defer tr.CloseIdleConnections()
			req := tt.req()
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d, want 200", resp.StatusCode)
			}
			fell := int32(1)
			if tt.dials > 0 {
				fell = 0
			}
			if n, d := rec.n.Load(), dials.Load(); n != fell || d != tt.dials {
				t.Errorf("fallback %d, direct dials %d; want %d and %d", n, d, fell, tt.dials)
			}
		})
	}
}

// FuzzTransportAnswers holds the direct path to one rule whatever an upstream writes on a
// connection: no byte of it is ever taken as the answer to a later request. The upstream
// answers a request for /fuzz with the fuzzed bytes and closes the connection, and any other
// path with itself; the second request's path is a nonce the fuzzed bytes cannot hold.
//
// One listener serves every input, and the transport's connections close with a reset, so
// that a long run leaves no port waiting in TIME_WAIT.
func FuzzTransportAnswers(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\npoison",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok",
		"HTTP/1.0 200 OK\r\n\r\nok",
		"garbage",
		"",
	} {
		f.Add(s)
	}
	var answer atomic.Pointer[string]
	addr := rawUpstream(f, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/fuzz" {
				io.WriteString(c, *answer.Load())
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			c.(*net.TCPConn).SetLinger(0)
		}
		return c, err
	}
	f.Fuzz(func(t *testing.T, fuzzed string) {
		answer.Store(&fuzzed)
		tr := &gateway.Transport{Dial: dial, ResponseHeaderTimeout: 5 * time.Second}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://"+addr+"/fuzz", nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		nonce := "/" + strconv.FormatUint(rand.Uint64(), 36)
		req, _ = http.NewRequest("GET", "http://"+addr+nonce, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("the second request: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != nonce {
			t.Fatalf("the second answer %q (%v), want %q", b, err, nonce)
		}
	})
}

// BenchmarkTransport sends GETs to a local upstream from GOMAXPROCS goroutines, on the direct
// path and through the http.Transport it falls back to.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	tr := gateway.NewTransport()
	defer tr.CloseIdleConnections()
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"direct", tr}, {"http.Transport", tr.Fallback}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", srv.URL, nil)
					resp, err := bc.rt.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
