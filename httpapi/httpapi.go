package httpapi

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// WriteJSON writes v as a JSON answer with status: one line, Content-Length set, no HTML
// escaping (an answer is read by programs and people, and "x > 0" reads better than
// "x \u003e 0"). A value that cannot be encoded is a 500 INTERNAL error body instead.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = Marshal(apiv1.ErrorBody{Error: apiv1.Errorf(status, apiv1.CodeInternal, "encode answer: %v", err)})
	}
	WriteEncoded(w, status, body)
}

// WriteEncoded writes body, a JSON answer already encoded (as Marshal does), with status and
// Content-Length.
func WriteEncoded(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// Marshal encodes v as WriteJSON writes it: one line of JSON, newline-terminated, without
// HTML escaping.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteError writes err as the error body {"error": {...}}: an *apiv1.Error (found with
// errors.As) with its status (400 when it has none), anything else as 500 INTERNAL. A 401
// carries WWW-Authenticate.
func WriteError(w http.ResponseWriter, err error) {
	ae := AsError(err)
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshflows"`)
	}
	WriteJSON(w, ae.Status, apiv1.ErrorBody{Error: ae})
}

// AsError is the *apiv1.Error err is or wraps (400 when it has no status), or a 500
// INTERNAL one that carries err's text.
func AsError(err error) *apiv1.Error {
	var ae *apiv1.Error
	if !errors.As(err, &ae) {
		return apiv1.Errorf(http.StatusInternalServerError, apiv1.CodeInternal, "%v", err)
	}
	if ae.Status == 0 {
		ae.Status = http.StatusBadRequest
	}
	return ae
}

// NotRouted answers a request that no pattern of mux takes: 405 METHOD_NOT_ALLOWED with
// Allow when the path exists under other methods, else 404 NOT_FOUND, both with the error
// body. Register it as mux's catch-all "/".
func NotRouted(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { WriteError(w, RouteError(mux, r, w.Header())) }
}

// RouteError is the error NotRouted answers for r, which no pattern of mux takes; with a
// 405 it sets Allow on h.
func RouteError(mux *http.ServeMux, r *http.Request, h http.Header) *apiv1.Error {
	var allow []string
	for _, m := range apiv1.Methods {
		probe := *r
		probe.Method = m
		if _, p := mux.Handler(&probe); p != "" && p != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		h.Set("Allow", strings.Join(allow, ", "))
		return apiv1.Errorf(http.StatusMethodNotAllowed, apiv1.CodeMethodNotAllowed,
			"method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))
	}
	return apiv1.Errorf(http.StatusNotFound, apiv1.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
}

// DefaultShutdownTimeout is how long Serve waits for requests in flight when its context
// ends, unless told otherwise.
const DefaultShutdownTimeout = 10 * time.Second

// Shutdown says how Serve ends when its context does.
type Shutdown struct {
	// Timeout bounds the wait for requests in flight (DefaultShutdownTimeout when 0).
	Timeout time.Duration
	// CancelRequests ends the requests' contexts before the wait, so that long polls answer
	// at once with what they have (the registry). Without it requests in flight run to
	// their end within Timeout (a proxied upload, a workflow run).
	CancelRequests bool
}

// Serve serves srv on ln until ctx ends, then shuts it down gracefully as sd says, and closes
// the connections still busy when the wait ends. It sets srv's BaseContext. A serving error other than the shutdown is returned.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, sd Shutdown) error {
	if sd.Timeout <= 0 {
		sd.Timeout = DefaultShutdownTimeout
	}
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	if sd.CancelRequests {
		cancelRequests()
	}
	sctx, cancel := context.WithTimeout(context.Background(), sd.Timeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// past the wait, connections still busy are closed: left open, each kept its
		// goroutines (and its client waiting) after Serve had returned
		srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// WriteCSV answers 200 with a CSV download named filename: the header row, then the rows
// rows gives to emit. Every cell a spreadsheet would run as a formula is quoted (SafeCell),
// so an export never carries someone's formula into an operator's spreadsheet.
func WriteCSV(w http.ResponseWriter, filename string, header []string, rows func(emit func(cells ...string))) error {
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	cw.Write(header)
	rows(func(cells ...string) {
		for i, c := range cells {
			cells[i] = SafeCell(c)
		}
		cw.Write(cells)
	})
	cw.Flush()
	return cw.Error()
}

// SafeCell returns s as a spreadsheet shows it and never runs it: a cell starting with =, +,
// -, @, a tab or a carriage return gets a leading quote.
func SafeCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// DefaultBodyTimeout is what BodyTimeout's servers give a request body to arrive, as the
// registry, the gateway and the orchestrator do.
const DefaultBodyTimeout = 10 * time.Second

// BodyTimeout makes every request body h reads arrive within d of the request's start: a
// client that trickles its body has its read fail past it (h answers the failed read) instead
// of holding a connection and a goroutine for as long as it likes. The deadline is cleared
// once the body ended, so that a long answer (a long poll, a stream) is not cut by it.
func BodyTimeout(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(d)) != nil {
			h.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = b
		defer b.clear()
		h.ServeHTTP(w, r)
	})
}

// deadlineBody clears its connection's read deadline when the body ends.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.clear()
	}
	return n, err
}

func (b *deadlineBody) clear() {
	if !b.cleared {
		b.cleared = true
		b.rc.SetReadDeadline(time.Time{})
	}
}
