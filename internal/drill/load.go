package drill

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// request is one request the load generator sent and what came of it.
type request struct {
	at       time.Time
	gateway  int
	path     string
	code     int    // 0: no answer (transport error, timeout)
	instance string // the X-Instance of the answer
	took     time.Duration
}

func (r request) failed() bool { return r.code == 0 || r.code >= 500 }

// Load sends publishes through each gateway at a fixed rate and records every answer with
// the instance that served it.
type Load struct {
	s       *Stack
	rate    atomic.Int64  // requests a second per gateway
	only    atomic.Int64  // 0: every gateway; n: gateway n alone
	timeout time.Duration // each request's deadline: the caller's
	clients []*http.Client

	mu   sync.Mutex
	reqs []request
}

func newLoad(s *Stack, rate int) *Load {
	l := &Load{s: s, timeout: 5 * time.Second}
	l.rate.Store(int64(rate))
	for range s.Gateways {
		c := &http.Client{Transport: s.Admin.Transport.(*http.Transport).Clone(), Timeout: l.timeout}
		c.Transport.(*http.Transport).MaxIdleConnsPerHost = 512
		l.clients = append(l.clients, c)
	}
	return l
}

// Run sends until ctx ends; every request it started has ended when it returns.
func (l *Load) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range l.s.Gateways {
		wg.Go(func() { l.drive(ctx, i, &wg) })
	}
	wg.Wait()
	return nil
}

// drive paces one gateway's requests: each starts on its own, so a slow answer does not
// slow the rate (an open loop, as real callers are).
func (l *Load) drive(ctx context.Context, gw int, wg *sync.WaitGroup) {
	next := time.Now()
	n := 0
	for {
		rate := l.rate.Load()
		if only := l.only.Load(); only != 0 && int(only) != gw+1 || rate <= 0 {
			rate = 0
		}
		wait := 100 * time.Millisecond
		if rate > 0 {
			wait = time.Second / time.Duration(rate)
		}
		next = next.Add(wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		if rate == 0 {
			continue
		}
		n++
		path := "/api/messaging/jms/publish"
		if n%5 == 0 { // the second pool gets a fifth
			path = "/api/messaging/rabbitmq/publish"
		}
		wg.Go(func() { l.send(ctx, gw, path) })
	}
}

func (l *Load) send(ctx context.Context, gw int, path string) {
	start := time.Now()
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, l.s.Gateways[gw]+path,
		strings.NewReader(`{"destination":"drill","payload":1}`))
	req.Header.Set("Content-Type", "application/json")
	r := request{at: start, gateway: gw, path: path}
	resp, err := l.clients[gw].Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.code, r.instance = resp.StatusCode, resp.Header.Get("X-Instance")
	}
	r.took = time.Since(start)
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
}

// SetRate sets the requests a second per gateway from now on.
func (l *Load) SetRate(perGateway int) { l.rate.Store(int64(perGateway)) }

// Only sends through gateway n alone (1-based); 0 through every gateway.
func (l *Load) Only(n int) { l.only.Store(int64(n)) }

// tally counts the requests started in [from, to).
type tally struct {
	sent, failed int
	byInstance   map[string]int
	slow         int // answered after more than 150 ms
}

func (l *Load) between(from, to time.Time) tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := tally{byInstance: map[string]int{}}
	for _, r := range l.reqs {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		t.sent++
		if r.failed() {
			t.failed++
		}
		if r.instance != "" {
			t.byInstance[r.instance]++
		}
		if r.took > 150*time.Millisecond {
			t.slow++
		}
	}
	return t
}

// answeredBy counts the requests for path started in [from, to) that instance answered.
func (l *Load) answeredBy(instance, path string, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if r.instance == instance && r.path == path && !r.at.Before(from) && r.at.Before(to) {
			n++
		}
	}
	return n
}

// settle waits until every request started before t has ended (at most the request timeout).
func (l *Load) settle(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(l.timeout + 100*time.Millisecond):
	}
}
