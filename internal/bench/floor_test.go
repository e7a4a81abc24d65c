package bench_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/bench"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

var floorAnswers = bench.FloorAnswers{Register: []byte(`{"generation":7}`), Heartbeat: []byte(`{"generation":7,"lease_ttl_seconds":30}`),
	Discovery: []byte(`{"capabilities":[]}`)}

// startFloor serves a floor server of kind in this process until the test ends.
func startFloor(t *testing.T, kind string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bench.ServeFloor(ctx, l, kind, floorAnswers) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeFloor(%s) = %v after its context ended, want nil", kind, err)
		}
	})
	return "http://" + l.Addr().String()
}

// TestServeFloor sends each floor server what the bench's driver sends, over keep-alive
// connections: each method gets its answer, whole, and any other method 405.
func TestServeFloor(t *testing.T) {
	for _, kind := range bench.FloorKinds {
		t.Run(kind, func(t *testing.T) {
			url := startFloor(t, kind)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			tests := []struct {
				method, path, body string
				want               int
				answer             []byte
			}{
				{"POST", "/v1/services/register", `{"instance_id":"a"}`, 200, floorAnswers.Register},
				{"PUT", "/v1/services/a/heartbeat", `{"generation":7}`, 200, floorAnswers.Heartbeat},
				{"GET", "/v1/discovery/capabilities?capability_id=x", "", 200, floorAnswers.Discovery},
				{"PUT", "/v1/services/a/heartbeat", strings.Repeat("x", 70000), 200, floorAnswers.Heartbeat}, // a body past the read buffer
				{"DELETE", "/v1/services/a", "", 405, nil},
				{"GET", "/v1/discovery/capabilities", "", 200, floorAnswers.Discovery}, // the connection still serves
			}
			for _, tt := range tests {
				req, _ := http.NewRequest(tt.method, url+tt.path, strings.NewReader(tt.body))
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", tt.method, tt.path, err)
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != tt.want || tt.answer != nil && !bytes.Equal(b, tt.answer) {
					t.Errorf("%s %s = %d %q (%v), want %d %q", tt.method, tt.path, resp.StatusCode, b, err, tt.want, tt.answer)
				}
			}
		})
	}
}

// TestServeFloorRefusesUnknownKind: a kind that is not a floor server is an error, and the
// listener is closed.
func TestServeFloorRefusesUnknownKind(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.ServeFloor(context.Background(), l, "nginx", floorAnswers); err == nil {
		t.Error("ServeFloor(nginx) = nil")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener after a refused kind: Accept = %v, want closed", err)
	}
}

// TestFloorTCPRefusesWhatItDoesNotRead: the raw responder closes a connection whose request it
// does not read (chunked, a huge header line, a bad length, not HTTP/1.1) rather than guess.
func TestFloorTCPRefusesWhatItDoesNotRead(t *testing.T) {
	url := startFloor(t, bench.FloorTCP)
	addr := strings.TrimPrefix(url, "http://")
	for name, req := range map[string]string{
		"chunked":      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"long header":  "GET / HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n",
		"bad length":   "PUT / HTTP/1.1\r\nContent-Length: -4\r\n\r\n",
		"huge length":  "PUT / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
		"HTTP/1.0":     "GET / HTTP/1.0\r\n\r\n",
		"no version":   "GET /\r\n\r\n",
		"many headers": "GET / HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 101) + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if errors.Is(err, syscall.ECONNRESET) {
				err = nil // closed with the request unread
			}
			if err != nil || len(got) != 0 {
				t.Errorf("answer %q (%v), want the connection closed without one", got, err)
			}
		})
	}
}

// FuzzFloorRequest: whatever a connection sends, the raw responder answers only what it
// reads as whole requests, each with one of its answers or a 405, and never panics.
func FuzzFloorRequest(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add([]byte("PUT /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcPOST /b HTTP/1.1\r\ncontent-length:0\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))
	f.Add([]byte("DELETE / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"))
	answers := map[string]bool{string(floorAnswers.Register): true, string(floorAnswers.Heartbeat): true, string(floorAnswers.Discovery): true}
	f.Fuzz(func(t *testing.T, in []byte) {
		got := bench.RespondFloorTo(in, floorAnswers)
		for len(got) > 0 {
			head, rest, ok := bytes.Cut(got, []byte("\r\n\r\n"))
			if !ok {
				t.Fatalf("an answer without its head's end: %q", got)
			}
			_, cl, _ := bytes.Cut(head, []byte("Content-Length: "))
			n, err := strconv.Atoi(string(cl))
			if err != nil || n > len(rest) {
				t.Fatalf("an answer with a bad length: %q", got)
			}
			switch {
			case bytes.HasPrefix(head, []byte("HTTP/1.1 405 ")) && n == 0:
			case bytes.HasPrefix(head, []byte("HTTP/1.1 200 OK\r\n")) && answers[string(rest[:n])]:
			default:
				t.Fatalf("an answer that is neither a 405 nor one of the answers: %q", got)
			}
			got = rest[n:]
		}
	})
}

// TestRunRegistryFloor runs a registry's exchanges, then the same against both floor
// servers, each in a process of its own (this test binary, as 'meshflows bench
// floor-server'), and compares their CPU per operation.
func TestRunRegistryFloor(t *testing.T) {
	t.Setenv(floorChild, "1")
	s := registrytest.NewServer(t, registry.Config{})
	rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 250, Concurrency: 4, Queries: 20, Changes: 5,
		ServerPID: os.Getpid(), FloorCommand: []string{os.Args[0]}})
	if err != nil {
		t.Fatalf("RunRegistry: %v", err)
	}
	checkPhases(t, "registry", rep.Phases)
	if len(rep.Floor) != len(bench.FloorKinds) {
		t.Fatalf("%d floor reports, want %d: %+v", len(rep.Floor), len(bench.FloorKinds), rep.Floor)
	}
	want := map[string]int{"register": 250, "heartbeat": 250, "discovery": 20}
	for i, f := range rep.Floor {
		if f.Server != bench.FloorKinds[i] {
			t.Errorf("floor %d is %q, want %q", i, f.Server, bench.FloorKinds[i])
		}
		if len(f.Phases) != len(want) {
			t.Errorf("%s: %d phases, want %d", f.Server, len(f.Phases), len(want))
		}
		for _, p := range f.Phases {
			if p.Errors != 0 || p.Ops != want[p.Name] {
				t.Errorf("%s phase %s: %d ops, %d errors (%s), want %d ops", f.Server, p.Name, p.Ops, p.Errors, p.FirstError, want[p.Name])
			}
			if p.ServerRSS <= 0 { // measured: the child's pid, not this process's
				t.Errorf("%s phase %s: no server RSS measured", f.Server, p.Name)
			}
		}
	}
	var out bytes.Buffer
	if err := bench.WriteFloor(&out, rep); err != nil || !strings.Contains(out.String(), "registry/net/http") || strings.Count(out.String(), "\n") != 4 {
		t.Errorf("WriteFloor = %q, %v", out.String(), err)
	}
}

// TestRunRegistryFloorFails: a floor server that does not start, or that fails, is an error
// of the run, which keeps the registry's figures.
func TestRunRegistryFloorFails(t *testing.T) {
	s := registrytest.NewServer(t, registry.Config{})
	for name, command := range map[string][]string{
		"no URL":        {"sh", "-c", "echo starting; exit 0", "sh"},
		"not a command": {"/nonexistent/meshflows"},
		"exits failing": {"sh", "-c", "echo http://127.0.0.1:1; echo broken >&2; exit 3", "sh"},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 20, Concurrency: 2, Queries: 2, Changes: 1,
				FloorCommand: command})
			if err == nil || !strings.Contains(err.Error(), "floor server") {
				t.Errorf("RunRegistry = %v, want a floor server's error", err)
			}
			if rep == nil || len(rep.Phases) == 0 {
				t.Errorf("the registry's figures are lost: %+v", rep)
			}
		})
	}
	// a floor server that answers every exchange, then exits failing
	t.Run("fails at its end", func(t *testing.T) {
		t.Setenv(floorChild, "fail")
		rep, err := bench.RunRegistry(context.Background(), bench.RegistryConfig{URL: s.URL, Instances: 20, Concurrency: 2, Queries: 2, Changes: 1,
			FloorCommand: []string{os.Args[0]}})
		if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "failing as asked") {
			t.Errorf("RunRegistry = %v, want the floor server's exit status and what it said", err)
		}
		if rep == nil || len(rep.Floor) != 1 || len(rep.Floor[0].Phases) != 3 {
			t.Errorf("the failing floor's figures are lost: %+v", rep)
		}
	})
}
