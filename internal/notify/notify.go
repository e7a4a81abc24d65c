package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// Schema names the version of a notification's body.
const Schema = "meshflows.owner-notification/v1"

// Headers of a webhook delivery. The signature is "sha256=" and the hex HMAC-SHA256, keyed by
// the owner's secret, of the timestamp header's value, a ".", and the body: a receiver
// recomputes it, compares in constant time, and refuses a timestamp too old (replays).
const (
	HeaderSignature = "X-MeshFlows-Signature"
	HeaderTimestamp = "X-MeshFlows-Timestamp"
	HeaderDelivery  = "X-MeshFlows-Delivery"
)

// Defaults of Config.
const (
	DefaultEvery    = time.Hour
	DefaultAttempts = 6
	DefaultBackoff  = time.Second
	DefaultTimeout  = 5 * time.Second
	DefaultQueue    = 1000
	DefaultRunbook  = "https://github.com/meshflows/meshflows/blob/main/docs/runbooks/ticket-owner.md"
)

// Notice is the body of one notification (docs/reference/owner-notifications.md).
type Notice struct {
	Schema     string    `json:"schema"`
	ID         string    `json:"id"`
	At         time.Time `json:"at"`
	Owner      string    `json:"owner"`
	InstanceID string    `json:"instance_id"`
	Service    string    `json:"service,omitempty"`
	Zone       string    `json:"zone,omitempty"`
	// Cause is the defect: FLAPPING (quarantined), OUTLIER_RELATIVE, OUTLIER_LATENCY or
	// SELF_REPORTED_FAILING.
	Cause string `json:"cause"`
	// State is the instance's eligibility state when it was noticed, Reasons all its reasons.
	State    string   `json:"state"`
	Reasons  []string `json:"reasons"`
	Evidence string   `json:"evidence"`
	// Incident is the incident raised for it, when one is (a quarantine).
	Incident *IncidentRef `json:"incident,omitempty"`
	Runbook  string       `json:"runbook"`
}

// IncidentRef names an incident of the registry.
type IncidentRef struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Path is the incident's API path on the registry (GET).
	Path string `json:"path"`
}

// Journal records what the notifier did (the registry's event journal).
type Journal interface {
	Record(typ, severity, subject, message string, attrs map[string]any)
}

// Incidents records who was told of an incident.
type Incidents interface {
	Told(id string, n apiv1.OwnerNotice) bool
}

// Config configures a Notifier.
type Config struct {
	// Owners maps owners to webhooks; nil or empty: notifications are journal events only.
	Owners *Owners
	// Client sends the webhooks (default: a client with Timeout per attempt).
	Client *http.Client
	// Every bounds notifications per (instance, cause): at most one this often (default 1 h).
	Every time.Duration
	// Attempts, Backoff: a delivery is tried this many times (default 6), waiting Backoff
	// (default 1 s) and doubling between attempts; Timeout bounds each (default 5 s).
	Attempts int
	Backoff  time.Duration
	Timeout  time.Duration
	// Queue bounds the notifications waiting (default 1000); past it they are dropped and
	// counted: never does a notification hold up a verdict.
	Queue int
	// Runbook is the link each notification carries (default the ticket-owner runbook).
	Runbook   string
	Journal   Journal
	Incidents Incidents
	Now       func() time.Time
	Logger    *slog.Logger
	// Registerer receives meshflows_owner_notifications_total{result}; nil registers none.
	Registerer prometheus.Registerer
}

// Validate reports settings that cannot work.
func (c *Config) Validate() error {
	if c.Every < 0 || c.Attempts < 0 || c.Backoff < 0 || c.Timeout < 0 || c.Queue < 0 {
		return errors.New("notify: every, attempts, backoff, timeout and queue must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Every == 0 {
		c.Every = DefaultEvery
	}
	if c.Attempts == 0 {
		c.Attempts = DefaultAttempts
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Queue == 0 {
		c.Queue = DefaultQueue
	}
	if c.Runbook == "" {
		c.Runbook = DefaultRunbook
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: c.Timeout}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Results of meshflows_owner_notifications_total.
const (
	resultDelivered  = "delivered"  // a webhook answered 2xx
	resultJournal    = "journal"    // no webhook for the owner: the journal event is the notification
	resultFailed     = "failed"     // every attempt refused
	resultRetried    = "retried"    // one attempt refused, another follows
	resultSuppressed = "suppressed" // within Every of the last of its (instance, cause)
	resultDropped    = "dropped"    // the queue was full
	resultNoOwner    = "no_owner"   // the instance names no owner
	workers          = 4            // deliveries in flight at once
	incidentPath     = "/v1/incidents/"
)

// Notifier tells owners about their instances' defects, off the verdict path: Notify only
// queues; Run delivers.
type Notifier struct {
	cfg   Config
	queue chan Notice
	total *prometheus.CounterVec

	mu   sync.Mutex
	last map[[2]string]time.Time // (instance, cause) → when it was last queued
}

// New returns a notifier with cfg.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	n := &Notifier{cfg: cfg, queue: make(chan Notice, cfg.Queue), last: map[[2]string]time.Time{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshflows_owner_notifications_total",
			Help: "Owner notifications, by result: delivered (webhook 2xx), journal (no webhook: the journal event), failed (every attempt refused), retried, suppressed (once per instance and cause per hour), dropped (queue full), no_owner."},
			[]string{"result"})}
	for _, r := range []string{resultDelivered, resultJournal, resultFailed, resultRetried, resultSuppressed, resultDropped, resultNoOwner} {
		n.total.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(n.total); err != nil {
			return nil, fmt.Errorf("register notification metrics: %w", err)
		}
	}
	return n, nil
}

// Notify queues a notice unless its (instance, cause) was notified within Every, or the
// queue is full; it never blocks, so it may run under the eligibility monitor's lock.
func (n *Notifier) Notify(nt Notice) {
	if nt.Owner == "" {
		n.total.WithLabelValues(resultNoOwner).Inc()
		return
	}
	now := n.cfg.Now()
	k := [2]string{nt.InstanceID, nt.Cause}
	n.mu.Lock()
	if at, ok := n.last[k]; ok && now.Sub(at) < n.cfg.Every {
		n.mu.Unlock()
		n.total.WithLabelValues(resultSuppressed).Inc()
		return
	}
	n.last[k] = now
	if len(n.last) > 4*n.cfg.Queue { // forget what no longer suppresses anything
		for k, at := range n.last {
			if now.Sub(at) >= n.cfg.Every {
				delete(n.last, k)
			}
		}
	}
	n.mu.Unlock()
	nt.Schema, nt.ID = Schema, newID()
	if nt.At.IsZero() {
		nt.At = now.UTC()
	}
	if nt.Runbook == "" {
		nt.Runbook = n.cfg.Runbook
	}
	select {
	case n.queue <- nt:
	default:
		n.total.WithLabelValues(resultDropped).Inc()
		n.cfg.Logger.Warn("owner notification dropped: the queue is full", slog.String("owner", nt.Owner), slog.String("instance_id", nt.InstanceID), slog.String("cause", nt.Cause))
	}
}

// Run delivers queued notifications until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case nt := <-n.queue:
					n.deliver(ctx, nt)
				}
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// deliver sends nt to its owner's webhook, retrying with backoff, then says what happened:
// the journal event, the incident's record of who was told, the metric.
func (n *Notifier) deliver(ctx context.Context, nt Notice) {
	hook, ok := n.cfg.Owners.Webhook(nt.Owner)
	delivery, attempts := apiv1.DeliveryJournal, 0
	var lastErr error
	if ok {
		body, err := json.Marshal(nt)
		if err != nil {
			lastErr = err
		} else {
			wait := n.cfg.Backoff
			for attempts < n.cfg.Attempts && ctx.Err() == nil {
				attempts++
				if lastErr = n.post(ctx, hook, nt.ID, body); lastErr == nil {
					break
				}
				if attempts == n.cfg.Attempts {
					break
				}
				n.total.WithLabelValues(resultRetried).Inc()
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
				wait *= 2
			}
		}
		if attempts == 0 && lastErr == nil { // the registry stops: nothing was sent
			n.total.WithLabelValues(resultDropped).Inc()
			n.cfg.Logger.Warn("owner notification not sent: the registry stops", slog.String("owner", nt.Owner), slog.String("instance_id", nt.InstanceID))
			return
		}
		delivery = apiv1.DeliveryWebhook
		if lastErr != nil {
			delivery = apiv1.DeliveryFailed
		}
	}
	n.record(nt, delivery, attempts, lastErr)
}

// post sends one attempt.
func (n *Notifier) post(ctx context.Context, hook Webhook, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(n.cfg.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "meshflows-notify")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderDelivery, id)
	if len(hook.secret) > 0 {
		req.Header.Set(HeaderSignature, Sign(hook.secret, ts, body))
	}
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}

// Sign returns the signature header's value for body sent at timestamp ts.
func Sign(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig is the signature of body sent at ts (a receiver's check, and
// the tests').
func Verify(secret []byte, ts string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Sign(secret, ts, body)), []byte(sig))
}

// record says what a delivery did.
func (n *Notifier) record(nt Notice, delivery string, attempts int, err error) {
	result := map[string]string{apiv1.DeliveryWebhook: resultDelivered, apiv1.DeliveryJournal: resultJournal, apiv1.DeliveryFailed: resultFailed}[delivery]
	n.total.WithLabelValues(result).Inc()
	attrs := map[string]any{"owner": nt.Owner, "instance_id": nt.InstanceID, "cause": nt.Cause, "delivery": delivery, "notification_id": nt.ID}
	if attempts > 0 {
		attrs["attempts"] = attempts
	}
	if nt.Incident != nil {
		attrs["incident_id"] = nt.Incident.ID
	}
	if delivery == apiv1.DeliveryFailed {
		attrs["error"] = err.Error()
		n.cfg.Logger.Warn("owner notification failed", slog.String("owner", nt.Owner), slog.String("instance_id", nt.InstanceID),
			slog.String("cause", nt.Cause), slog.Int("attempts", attempts), slog.Any("error", err))
		if n.cfg.Journal != nil {
			n.cfg.Journal.Record(apiv1.EventOwnerNotifyFailed, apiv1.SeverityWarning, nt.InstanceID,
				fmt.Sprintf("owner %s of %s was not told of %s: its webhook refused %d attempts (%v)", nt.Owner, nt.InstanceID, nt.Cause, attempts, err), attrs)
		}
	} else if n.cfg.Journal != nil {
		how := "by its webhook"
		if delivery == apiv1.DeliveryJournal {
			how = "by this event (no webhook for it in --owners)"
		}
		n.cfg.Journal.Record(apiv1.EventOwnerNotified, apiv1.SeverityInfo, nt.InstanceID,
			fmt.Sprintf("owner %s told of %s on %s %s", nt.Owner, nt.Cause, nt.InstanceID, how), attrs)
	}
	if nt.Incident != nil && n.cfg.Incidents != nil {
		n.cfg.Incidents.Told(nt.Incident.ID, apiv1.OwnerNotice{At: n.cfg.Now().UTC(), Owner: nt.Owner, InstanceID: nt.InstanceID,
			Cause: nt.Cause, Delivery: delivery, Attempts: attempts})
	}
}

// newID returns a random delivery id (128 bits, hex).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
