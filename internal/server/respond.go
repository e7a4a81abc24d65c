package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/tracing"
)

// handlerFunc answers a request with a value to encode as JSON (200), nil (204), an
// *encoded answer, or an error that respond maps to docs/reference/api.md's error body.
type handlerFunc func(w http.ResponseWriter, r *http.Request) (any, error)

func (s *Server) handle(pattern string, acc access, h handlerFunc) {
	s.mux.Handle(pattern, s.traced(pattern, s.audited(func(w http.ResponseWriter, r *http.Request) {
		r, ok := s.guard(w, r, acc)
		if !ok {
			return
		}
		v, err := h(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		switch v := v.(type) {
		case nil:
			w.WriteHeader(http.StatusNoContent)
		case *encoded:
			v.write(w, r, s.cfg.GzipMinBytes)
		case written:
		case answerJSON:
			httpapi.WriteEncoded(w, http.StatusOK, v)
		default:
			httpapi.WriteJSON(w, http.StatusOK, v)
		}
	})))
}

// traced is h in a server span named by its route when tracing is on (heartbeats by
// tracing.HeartbeatSpan, which the default sampler keeps one in a hundred of), else h.
func (s *Server) traced(pattern string, h http.HandlerFunc) http.Handler {
	if !s.cfg.Tracing.On() {
		return h
	}
	name := "registry " + pattern
	if strings.HasSuffix(pattern, "/heartbeat") {
		name = tracing.HeartbeatSpan
	}
	return httpapi.Traced(s.cfg.Tracing.Tracer, name, h)
}

// answerJSON is an answer a handler wrote as JSON itself (as httpapi.Marshal writes it:
// one line and a newline), to go out with status 200.
type answerJSON []byte

// apiError maps an error to the wire error and its status.
func apiError(err error) *apiv1.Error {
	var ae *apiv1.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		if ae.Status == 0 {
			ae.Status = http.StatusBadRequest
		}
		return ae
	case errors.Is(err, registry.ErrInstanceNotFound):
		return &apiv1.Error{Status: http.StatusNotFound, Code: apiv1.CodeInstanceNotFound, Message: err.Error()}
	case errors.Is(err, registry.ErrGenerationMismatch):
		return &apiv1.Error{Status: http.StatusGone, Code: apiv1.CodeGenerationMismatch, Message: err.Error()}
	case errors.Is(err, incident.ErrBadAction):
		return &apiv1.Error{Status: http.StatusBadRequest, Code: apiv1.CodeInvalidRequest, Message: err.Error()}
	case errors.Is(err, incident.ErrNotFound):
		return &apiv1.Error{Status: http.StatusNotFound, Code: apiv1.CodeNotFound, Message: err.Error()}
	case errors.Is(err, registry.ErrNoEligibility):
		return &apiv1.Error{Status: http.StatusNotImplemented, Code: apiv1.CodeUnavailable, Message: err.Error() + " (it runs unless the registry was started with --no-eligibility)"}
	case errors.Is(err, registry.ErrForbidden):
		return &apiv1.Error{Status: http.StatusForbidden, Code: apiv1.CodeForbidden, Message: err.Error()}
	case errors.As(err, &mbe):
		return apiv1.Errorf(http.StatusRequestEntityTooLarge, apiv1.CodePayloadTooLarge, "request body is over the limit of %d bytes", mbe.Limit)
	case errors.Is(err, registry.ErrStoreUnavailable):
		return apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeStoreUnavailable, "%v", err)
	case errors.Is(err, registry.ErrWarmingUp):
		return apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "%v", err)
	case errors.Is(err, registry.ErrNoSnapshotDir):
		// permanent until the registry is started otherwise: no client should retry it
		return apiv1.Errorf(http.StatusConflict, apiv1.CodeNotConfigured, "%v: start the registry with --snapshot-dir", err)
	default:
		return nil
	}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := apiError(err)
	if ae == nil {
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		ae = apiv1.Errorf(http.StatusInternalServerError, apiv1.CodeInternal, "internal error")
	}
	if after, ok := retryAfter(err); ok {
		w.Header().Set("Retry-After", after)
	} else if ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	httpapi.WriteJSON(w, ae.Status, apiv1.ErrorBody{Error: ae})
}

// notRouted answers a request no pattern takes: 405 with Allow when the path exists under
// other methods, 404 otherwise (the provider SDK's RouteError, shared by every server).
func (s *Server) notRouted(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, httpapi.RouteError(s.mux, r, w.Header()))
}

// decode reads a JSON body of at most the configured size into v. Syntax and type errors
// are INVALID_JSON (with the field when known); an oversized body is PAYLOAD_TOO_LARGE.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	_, err := s.decodeBody(w, r, v)
	return err
}

// decodeStrict is decode for the operator actions: a member v does not define is refused
// with 400 UNKNOWN_FIELD naming the nearest field (a misspelt field must never widen an
// action), and an empty body is an empty object, so that the action lists every field it
// misses.
func (s *Server) decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := decodeJSON(body, v); err != nil {
		return err
	}
	return apiv1.RefuseUnknownFields(body, v)
}

// decodeBody reads a JSON request body (readBody) into v and returns the body.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	return body, decodeJSON(body, v)
}

// readBody reads a JSON request body of at most the configured size, within the body
// timeout. A Content-Type other than JSON is 415 (an absent one is taken as JSON).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := requireJSON(r); err != nil {
		return nil, err
	}
	// The body is read under its own deadline (not the server's ReadTimeout, which would
	// also end long polls), cleared once it is read.
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	declared := r.ContentLength
	if declared > s.cfg.MaxBodyBytes {
		declared = -1 // refused at the limit: no buffer of the declared size for it
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), declared)
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, err
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			return nil, apiv1.Errorf(http.StatusRequestTimeout, apiv1.CodeRequestTimeout, "the request body did not arrive within %s", s.cfg.BodyTimeout)
		}
		return nil, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "read body: %v", err)
	}
	return body, nil
}

// presizeMax bounds the buffer readAll makes up front for a declared length: a client
// that declares a long body and sends little costs at most this until the body timeout.
const presizeMax = 64 << 10

// readAll reads r to its end. With the body's declared length n (> 0), it reads into a
// buffer of that size and one byte more, where the last read finds the end: io.ReadAll
// starts at 512 bytes and doubles, which is 512 bytes for a 20-byte heartbeat and two
// buffers for a registration a little over 512 bytes.
func readAll(r io.Reader, n int64) ([]byte, error) {
	if n <= 0 || n > presizeMax {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, n+1)
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) { // longer than declared: grow as io.ReadAll does
			b = append(b, 0)[:len(b)]
		}
	}
}

// requireJSON refuses a request body declared as anything but JSON (application/json, or a
// +json type) with 415 UNSUPPORTED_MEDIA_TYPE.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" { // the common case, without parsing
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return apiv1.Errorf(http.StatusUnsupportedMediaType, apiv1.CodeUnsupportedMediaType,
		"Content-Type %q: this endpoint takes application/json", ct)
}

func decodeJSON(body []byte, v any) error {
	if len(body) == 0 {
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "the request body is empty; a JSON object is expected")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		if path := duplicateKey(body); path != "" {
			// encoding/json keeps the last of two values of one key; a proxy or an SDK may keep
			// the first: the two would read a different request
			return apiv1.InvalidRequest([]apiv1.Detail{{Path: path, Message: "the key appears twice in its object"}})
		}
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "body is not valid JSON at offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		e := apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "body has the wrong JSON type at offset %d", te.Offset)
		path := te.Field
		if path == "" {
			path = "(body)"
		}
		e.Details = []apiv1.Detail{{Path: path, Message: fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)}}
		return e
	default:
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidJSON, "body is not the expected JSON: %v", err)
	}
}

// duplicateKey returns the path of the first key that appears twice in one object of the
// valid JSON b ("capabilities[0].provider"), or "".
func duplicateKey(b []byte) string {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	path, _ := dupIn(dec, "")
	return path
}

// dupIn reads one value from dec; at holds the value's path.
func dupIn(dec *json.Decoder, at string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", err
			}
			k, _ := kt.(string)
			p := k
			if at != "" {
				p = at + "." + k
			}
			if seen[k] {
				return p, nil
			}
			seen[k] = true
			if dup, err := dupIn(dec, p); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // }
		return "", err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if dup, err := dupIn(dec, at+"["+strconv.Itoa(i)+"]"); dup != "" || err != nil {
				return dup, err
			}
		}
		_, err = dec.Token() // ]
		return "", err
	}
	return "", nil
}
