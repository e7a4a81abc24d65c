// Package otlptest is an OTLP/HTTP trace receiver for tests: it decodes what exporters send
// (protobuf ExportTraceServiceRequest, gzip or not) and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is what a test reads of one received span.
type Span struct {
	Service                 string // the resource's service.name
	TraceID, SpanID, Parent string // hex; Parent "" for a root
	Name                    string
	Kind                    string // SERVER, CLIENT, INTERNAL…
	Attrs                   map[string]string
	Error                   bool // status code error
	Start, End              time.Time
}

// Receiver is an OTLP/HTTP endpoint on loopback; URL is its base (spans go to URL/v1/traces).
type Receiver struct {
	URL string
	mu  sync.Mutex
	got []Span
}

// Start runs a Receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.receive)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spans []Span
	for _, rs := range ex.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				spans = append(spans, Span{Service: service, TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Parent: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: spanKind(s.GetKind().String()), Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode().String() == "STATUS_CODE_ERROR",
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))})
			}
		}
	}
	r.mu.Lock()
	r.got = append(r.got, spans...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Write(b)
}

func spanKind(k string) string {
	const prefix = "SPAN_KIND_"
	if len(k) > len(prefix) {
		return k[len(prefix):]
	}
	return k
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		default:
			out[kv.GetKey()] = protoText(v)
		}
	}
	return out
}

func protoText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.got...)
}

// Await polls until cond holds over the spans received, failing the test after 20 s.
func (r *Receiver) Await(t testing.TB, what string, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans := r.Spans()
		if cond(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("never received %s; got %d spans:\n%s", what, len(spans), Dump(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Dump lists spans one a line, for a failure message.
func Dump(spans []Span) string {
	var b []byte
	for _, s := range spans {
		b = append(b, s.Service+" "+s.Kind+" "+s.Name+" trace="+s.TraceID+" span="+s.SpanID+" parent="+s.Parent+"\n"...)
	}
	return string(b)
}
