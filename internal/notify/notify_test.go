package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

// hook is a test webhook: it refuses its first refuse deliveries with 503, then records
// each delivery with its headers.
type hook struct {
	mu      sync.Mutex
	refuse  int
	bodies  [][]byte
	headers []http.Header
	got     chan struct{}
}

func newHook(refuse int) *hook { return &hook{refuse: refuse, got: make(chan struct{}, 16)} }

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse > 0 {
		h.refuse--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.bodies, h.headers = append(h.bodies, body), append(h.headers, r.Header.Clone())
	h.got <- struct{}{}
}

// fakeJournal records events; fakeIncidents records who was told.
type fakeJournal struct {
	mu     sync.Mutex
	events []string
	attrs  []map[string]any
}

func (j *fakeJournal) Record(typ, _, _, _ string, attrs map[string]any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events, j.attrs = append(j.events, typ), append(j.attrs, attrs)
}

type fakeIncidents struct {
	mu   sync.Mutex
	told map[string][]apiv1.OwnerNotice
}

func (f *fakeIncidents) Told(id string, n apiv1.OwnerNotice) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.told[id] = append(f.told[id], n)
	return true
}

func writeOwners(t *testing.T, url string) *Owners {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team.secret"), []byte("0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "owners.yaml")
	if err := os.WriteFile(path, []byte("owners:\n  team-messaging:\n    url: "+url+"\n    secret_file: team.secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := LoadOwners(path)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestNotifierDeliversSignedOnceAndRetries drives the hook a registry runs: a quarantine
// transition is delivered to the owner's webhook, signed, after two refused attempts; the
// same (instance, cause) within the hour is suppressed; an owner without a webhook is told by
// the journal event alone.
func TestNotifierDeliversSignedOnceAndRetries(t *testing.T) {
	h := newHook(2)
	srv := httptest.NewServer(h)
	defer srv.Close()
	j, inc := &fakeJournal{}, &fakeIncidents{told: map[string][]apiv1.OwnerNotice{}}
	n, err := New(Config{Owners: writeOwners(t, srv.URL), Backoff: time.Millisecond, Journal: j, Incidents: inc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	owners := map[string]Instance{"jms-1": {Owner: "team-messaging", Service: "jms", Zone: "z1"}, "mq-1": {Owner: "team-queues"}}
	hookFn := FromTransitions(n, func(id string) Instance { return owners[id] }, func(kind, subject string) (string, bool) {
		return "7", kind == apiv1.IncidentQuarantine && subject == "jms-1"
	})
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	hookFn(health.Transition{InstanceID: "jms-1", At: at, From: apiv1.EligibilityWithdrawn, To: apiv1.EligibilityQuarantined, Reasons: []string{health.ReasonFlapping}})
	hookFn(health.Transition{InstanceID: "jms-1", At: at, From: apiv1.EligibilityServing, To: apiv1.EligibilityQuarantined, Reasons: []string{health.ReasonFlapping}})   // suppressed
	hookFn(health.Transition{InstanceID: "jms-1", At: at, From: apiv1.EligibilityServing, To: apiv1.EligibilityWithdrawn, Reasons: []string{health.ReasonProbeFailing}}) // no defect of the owner's
	hookFn(health.Transition{InstanceID: "mq-1", At: at, From: apiv1.EligibilityServing, To: apiv1.EligibilityDegraded, Reasons: []string{health.ReasonOutlierLatency}})
	select {
	case <-h.got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10 s")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.mu.Lock()
		n := len(j.events)
		j.mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bodies) != 1 {
		t.Fatalf("%d deliveries, want 1", len(h.bodies))
	}
	hd := h.headers[0]
	if !Verify([]byte("0123456789abcdef-secret"), hd.Get(HeaderTimestamp), h.bodies[0], hd.Get(HeaderSignature)) {
		t.Errorf("signature %q does not verify", hd.Get(HeaderSignature))
	}
	if Verify([]byte("another-secret-0123"), hd.Get(HeaderTimestamp), h.bodies[0], hd.Get(HeaderSignature)) {
		t.Error("the signature verifies with another secret")
	}
	var got Notice
	if err := json.Unmarshal(h.bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.ID == "" || got.ID != hd.Get(HeaderDelivery) {
		t.Errorf("delivery id %q, header %q", got.ID, hd.Get(HeaderDelivery))
	}
	want := Notice{Schema: Schema, ID: got.ID, At: at, Owner: "team-messaging", InstanceID: "jms-1", Service: "jms", Zone: "z1",
		Cause: health.ReasonFlapping, State: apiv1.EligibilityQuarantined, Reasons: []string{health.ReasonFlapping}, Evidence: got.Evidence,
		Incident: &IncidentRef{ID: "7", Kind: apiv1.IncidentQuarantine, Path: "/v1/incidents/7"}, Runbook: DefaultRunbook}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("notification (-want +got):\n%s", diff)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	deliveries := map[string]string{}
	for i, e := range j.events {
		if e != apiv1.EventOwnerNotified {
			t.Errorf("journal event %q, want %s", e, apiv1.EventOwnerNotified)
		}
		deliveries[j.attrs[i]["owner"].(string)] = j.attrs[i]["delivery"].(string)
	}
	if diff := cmp.Diff(map[string]string{"team-messaging": apiv1.DeliveryWebhook, "team-queues": apiv1.DeliveryJournal}, deliveries); diff != "" {
		t.Errorf("deliveries by owner (-want +got):\n%s", diff)
	}
	if told := inc.told["7"]; len(told) != 1 || told[0].Owner != "team-messaging" || told[0].Attempts != 3 {
		t.Errorf("the incident was told %+v, want team-messaging after 3 attempts", told)
	}
	for result, want := range map[string]float64{resultDelivered: 1, resultJournal: 1, resultRetried: 2, resultSuppressed: 1} {
		if got := testutil.ToFloat64(n.total.WithLabelValues(result)); got != want {
			t.Errorf("meshflows_owner_notifications_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

func TestNotifierGivesUpAndSaysSo(t *testing.T) {
	srv := httptest.NewServer(newHook(100))
	defer srv.Close()
	j := &fakeJournal{}
	n, err := New(Config{Owners: writeOwners(t, srv.URL), Backoff: time.Millisecond, Attempts: 3, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	n.deliver(context.Background(), Notice{Owner: "team-messaging", InstanceID: "a", Cause: health.ReasonSelfReportedFailing})
	if len(j.events) != 1 || j.events[0] != apiv1.EventOwnerNotifyFailed || j.attrs[0]["attempts"] != 3 {
		t.Errorf("journal %v %v, want one %s after 3 attempts", j.events, j.attrs, apiv1.EventOwnerNotifyFailed)
	}
}

func TestNotifierSendsNothingOnceStopped(t *testing.T) {
	srv := httptest.NewServer(newHook(0))
	defer srv.Close()
	j := &fakeJournal{}
	n, err := New(Config{Owners: writeOwners(t, srv.URL), Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.deliver(ctx, Notice{Owner: "team-messaging", InstanceID: "a", Cause: health.ReasonFlapping})
	if len(j.events) != 0 || testutil.ToFloat64(n.total.WithLabelValues(resultDropped)) != 1 {
		t.Errorf("journal %v, dropped %v: a notification not sent is not told as delivered", j.events, testutil.ToFloat64(n.total.WithLabelValues(resultDropped)))
	}
}

func TestNotifyNeverBlocks(t *testing.T) {
	n, err := New(Config{Queue: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // nobody runs the notifier: the queue fills, the rest is dropped
		n.Notify(Notice{Owner: "o", InstanceID: string(rune('a' + i)), Cause: health.ReasonFlapping})
	}
	if got := testutil.ToFloat64(n.total.WithLabelValues(resultDropped)); got != 3 {
		t.Errorf("dropped %v, want 3", got)
	}
	n.Notify(Notice{InstanceID: "x", Cause: health.ReasonFlapping})
	if got := testutil.ToFloat64(n.total.WithLabelValues(resultNoOwner)); got != 1 {
		t.Errorf("no_owner %v, want 1", got)
	}
}

func TestLoadOwnersNamesEveryProblem(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.secret")
	if err := os.WriteFile(short, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, file, want string }{
		{"not https", "owners:\n  a:\n    url: http://hooks.example.com/x\n", "want an https URL"},
		{"no url", "owners:\n  a:\n    secret_file: short.secret\n", "owners.a.url: missing"},
		{"a short secret, and a missing one", "owners:\n  a:\n    url: https://h.example/x\n    secret_file: short.secret\n  b:\n    url: https://h.example/y\n    secret_file: nope\n", "fewer than 16 bytes"},
		{"an unknown field", "owners:\n  a:\n    url: https://h.example/x\n    secret: inline\n", "secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "owners.yaml")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOwners(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
			if tt.name == "a short secret, and a missing one" && !strings.Contains(err.Error(), "owners.b.secret_file") {
				t.Errorf("error %v names one problem of two", err)
			}
		})
	}
	o := writeOwners(t, "https://hooks.example.com/m")
	if _, ok := o.Webhook("team-unknown"); ok {
		t.Error("an owner the file does not list has a webhook without a fallback")
	}
}
