package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWriteError(t *testing.T) {
	for _, tt := range []struct {
		name       string
		err        error
		status     int
		body       string
		authHeader bool
	}{
		{"api error", apiv1.Errorf(404, apiv1.CodeNotFound, "no x > 0"), 404, `{"error":{"code":"NOT_FOUND","message":"no x > 0"}}` + "\n", false},
		{"wrapped", fmt.Errorf("ctx: %w", apiv1.Errorf(409, "C", "m")), 409, `{"error":{"code":"C","message":"m"}}` + "\n", false},
		{"no status", &apiv1.Error{Code: "C", Message: "m"}, 400, `{"error":{"code":"C","message":"m"}}` + "\n", false},
		{"plain", errors.New("boom"), 500, `{"error":{"code":"INTERNAL","message":"boom"}}` + "\n", false},
		{"unauthenticated", apiv1.Errorf(401, apiv1.CodeUnauthenticated, "who"), 401, `{"error":{"code":"UNAUTHENTICATED","message":"who"}}` + "\n", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			httpapi.WriteError(w, tt.err)
			if w.Code != tt.status || w.Body.String() != tt.body || w.Header().Get("Content-Type") != "application/json" ||
				(w.Header().Get("WWW-Authenticate") != "") != tt.authHeader {
				t.Errorf("= %d %q %v, want %d %q", w.Code, w.Body, w.Header(), tt.status, tt.body)
			}
		})
	}
}

func TestNotRouted(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /things", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("DELETE /things", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", httpapi.NotRouted(mux))
	for _, tt := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/things", 405, "DELETE, GET, HEAD"},
		{"GET", "/nothing", 404, ""},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(tt.method, tt.path, nil))
		if w.Code != tt.status || w.Header().Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d Allow %q, want %d %q", tt.method, tt.path, w.Code, w.Header().Get("Allow"), tt.status, tt.allow)
		}
	}
}

// serve runs httpapi.Serve of srv on a loopback port until stop is called; served says how
// Serve ended.
func serve(t *testing.T, srv *http.Server, sd httpapi.Shutdown) (addr string, stop context.CancelFunc, served <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- httpapi.Serve(ctx, srv, ln, sd) }()
	return ln.Addr().String(), stop, done
}

// TestServeShutdown: with CancelRequests a waiting request ends at once when the server
// stops; without it, it runs to its end.
func TestServeShutdown(t *testing.T) {
	for _, cancelRequests := range []bool{true, false} {
		t.Run(fmt.Sprint("cancel requests ", cancelRequests), func(t *testing.T) {
			entered, finish := make(chan struct{}), make(chan struct{})
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-r.Context().Done():
					w.Write([]byte("woken"))
				case <-finish:
					w.Write([]byte("finished"))
				}
			})}
			addr, stop, served := serve(t, srv, httpapi.Shutdown{Timeout: 5 * time.Second, CancelRequests: cancelRequests})
			got := make(chan string, 1)
			go func() {
				resp, err := http.Get("http://" + addr)
				if err != nil {
					got <- err.Error()
					return
				}
				defer resp.Body.Close()
				b := make([]byte, 16)
				n, _ := resp.Body.Read(b)
				got <- string(b[:n])
			}()
			<-entered
			stop()
			if !cancelRequests {
				close(finish)
			}
			want := map[bool]string{true: "woken", false: "finished"}[cancelRequests]
			if g := <-got; g != want {
				t.Errorf("the request answered %q, want %q", g, want)
			}
			if err := <-served; err != nil {
				t.Errorf("Serve = %v", err)
			}
			http.DefaultClient.CloseIdleConnections()
		})
	}
}

// TestServeClosesWhatOutlivesTheWait: a request that ignores its context and is still busy
// when the shutdown's wait ends has its connection closed: Serve returns the timeout, and
// the client is told at once rather than when the handler gives up.
func TestServeClosesWhatOutlivesTheWait(t *testing.T) {
	entered, finish := make(chan struct{}), make(chan struct{})
	defer close(finish)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-finish // deaf to its context
	})}
	addr, stop, served := serve(t, srv, httpapi.Shutdown{Timeout: 100 * time.Millisecond, CancelRequests: true})
	failed := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr)
		if err == nil {
			resp.Body.Close()
		}
		failed <- err
	}()
	<-entered
	stop()
	if err := <-served; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve = %v, want the shutdown's deadline", err)
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Error("the request was answered; want its connection closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the busy connection was left open after Serve returned")
	}
}

// TestWriteCSV: a download with the header row first, every cell a spreadsheet would run
// as a formula quoted, and plain cells as they are.
func TestWriteCSV(t *testing.T) {
	rec := httptest.NewRecorder()
	err := httpapi.WriteCSV(rec, "x.csv", []string{"a", "b"}, func(emit func(...string)) {
		emit("=1+1", "plain")
		emit("-2", "@SUM(A1)")
		emit("\tx", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if ct, cd := rec.Header().Get("Content-Type"), rec.Header().Get("Content-Disposition"); ct != "text/csv; charset=utf-8" || cd != `attachment; filename="x.csv"` {
		t.Errorf("headers %q, %q", ct, cd)
	}
	want := "a,b\n'=1+1,plain\n'-2,'@SUM(A1)\n'\tx,\n"
	if got := rec.Body.String(); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

// TestBodyTimeout: a body that trickles past the timeout fails its read, and the connection
// is not held; a body that arrives in time reads whole, and a long answer after it is not cut.
func TestBodyTimeout(t *testing.T) {
	read := make(chan error, 1)
	h := httpapi.BodyTimeout(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		read <- err
		if err == nil {
			time.Sleep(300 * time.Millisecond) // a long answer: the cleared deadline must not end it
		}
		io.WriteString(w, "done")
	}), 200*time.Millisecond)
	srv := httptest.NewServer(h)
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123") // then nothing
	select {
	case err := <-read:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("a trickling body read: %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a trickling body held its handler past the body timeout")
	}

	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("whole"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := <-read; err != nil || string(b) != "done" {
		t.Errorf("a body in time: read %v, answer %q", err, b)
	}
}
