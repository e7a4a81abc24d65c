package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/faultproxy"
	"github.com/meshflows/meshflows/internal/freeport"
)

// start runs a proxy in front of an upstream that answers its own name, until the test ends.
func start(t *testing.T, name string) (*faultproxy.Proxy, string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Instance", name)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	p, err := faultproxy.New(faultproxy.Config{Listen: "127.0.0.1:" + strconv.Itoa(freeport.Port(t)), Upstream: strings.TrimPrefix(up.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return p, "http://" + p.Addr()
}

type result struct {
	code    int
	refused bool // connection refused
	broken  bool // any other transport error (reset, EOF)
	timeout bool
}

func get(c *http.Client, url string) result {
	resp, err := c.Get(url)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return result{refused: true}
		case errors.As(err, &ne) && ne.Timeout():
			return result{timeout: true}
		}
		return result{broken: true}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return result{code: resp.StatusCode}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault faultproxy.Fault
		path  string
		want  result
	}{
		{"pass", faultproxy.Fault{}, "/work", result{code: 200}},
		{"refuse", faultproxy.Fault{Mode: faultproxy.Refuse}, "/work", result{refused: true}},
		{"reset", faultproxy.Fault{Mode: faultproxy.Reset}, "/work", result{broken: true}},
		{"blackhole", faultproxy.Fault{Mode: faultproxy.Blackhole}, "/work", result{timeout: true}},
		{"health failing: a probe", faultproxy.Fault{HealthFailing: true}, "/healthz", result{code: 503}},
		{"health failing: traffic passes", faultproxy.Fault{HealthFailing: true}, "/work", result{code: 200}},
		{"every request failing", faultproxy.Fault{ErrorShare: 1}, "/work", result{code: 500}},
		{"every request failing: probes pass", faultproxy.Fault{ErrorShare: 1}, "/healthz", result{code: 200}},
		{"every probe lost", faultproxy.Fault{HealthLoss: 1}, "/healthz", result{timeout: true}},
		{"every probe lost: traffic passes", faultproxy.Fault{HealthLoss: 1}, "/work", result{code: 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, base := start(t, "a")
			c := &http.Client{Timeout: 2 * time.Second} // a blackhole answers never: this deadline ends it
			if got := get(c, base+tt.path); got != (result{code: 200}) {
				t.Fatalf("before the fault: %+v", got)
			}
			if err := p.Set(tt.fault); err != nil {
				t.Fatal(err)
			}
			// the client's kept-alive connection is the first to meet the fault
			if got := get(c, base+tt.path); got != tt.want {
				t.Errorf("under %+v: %+v, want %+v", tt.fault, got, tt.want)
			}
			if err := p.Set(faultproxy.Fault{}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for got := get(c, base+tt.path); got != (result{code: 200}); got = get(c, base+tt.path) {
				if time.Now().After(deadline) {
					t.Fatalf("restored, still %+v", got)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestErrorShareIsExact(t *testing.T) {
	t.Parallel()
	p, base := start(t, "a")
	if err := p.Set(faultproxy.Fault{ErrorShare: 0.04}); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 500 {
		if get(http.DefaultClient, base+"/work").code == 500 {
			failed++
		}
	}
	if failed != 20 {
		t.Errorf("4 %% of 500 requests: %d answered 500, want 20", failed)
	}
	if s := p.Stats(); s.Injected != 20 || s.Traffic != 500 {
		t.Errorf("stats %+v, want 20 injected of 500", s)
	}
}

func TestDelayAndAttribution(t *testing.T) {
	t.Parallel()
	p, base := start(t, "a")
	if err := p.Set(faultproxy.Fault{Delay: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/work", nil)
	req.Header.Set("X-Forwarded-Host", "gw-1")
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(begin); d < 2*time.Second {
		t.Errorf("a delayed request took %v, want ≥ 2s", d)
	}
	if resp.Header.Get("X-Instance") != "a" {
		t.Errorf("answered by %q", resp.Header.Get("X-Instance"))
	}
	// a probe is not delayed: with a client deadline well under the delay, it still answers
	if got := get(&http.Client{Timeout: time.Second}, base+"/healthz"); got.code != 200 {
		t.Errorf("a probe under a 2 s delay of traffic: %+v, want 200 within 1 s", got)
	}
	s := p.Stats()
	if s.Traffic != 1 || s.Probes != 1 || s.LastTraffic["gw-1"].IsZero() {
		t.Errorf("stats %+v, want one request from gw-1 and one probe", s)
	}
}

func TestSetUpstreamSendsToTheNewProcess(t *testing.T) {
	t.Parallel()
	p, base := start(t, "old")
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-Instance", "new") }))
	defer impostor.Close()
	p.SetUpstream(strings.TrimPrefix(impostor.URL, "http://"))
	resp, err := http.Get(base + "/work")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Instance"); got != "new" {
		t.Errorf("after SetUpstream answered by %q, want new", got)
	}
}

func TestValidate(t *testing.T) {
	for _, f := range []faultproxy.Fault{{Mode: "explode"}, {ErrorShare: 1.5}, {Delay: -time.Second}} {
		if f.Validate() == nil {
			t.Errorf("%+v is valid, want an error", f)
		}
	}
}
