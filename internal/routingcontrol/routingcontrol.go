// Package routingcontrol is the per-region on/off switch that takes a region out of traffic,
// held in an etcd cluster of its own — never in a region's registry, so that nothing asks
// a registry whether that registry can be reached.
//
// The cluster holds one document (apiv1.RoutingSignal) with every region's switch, so that
// the safety rules (never the last region off; at least min_regions_on on) are checked in
// the transaction that changes it, and one audit record per action, done or refused.
// Control writes it (meshflows region on|off); Watcher keeps a consumer's copy, and keeps
// its last value when the cluster cannot be read (fail-static: unreachable is never off).
package routingcontrol

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// DefaultPrefix is where the routing control keeps its keys unless told otherwise.
const DefaultPrefix = "/meshflows/routing-control/"

// Defaults of the signal's settings.
const (
	DefaultMinRegionsOn      = 1
	DefaultChangeMinInterval = 30 * time.Second
)

// Config configures a Control.
type Config struct {
	// Client is connected to the routing-control cluster (its own credentials).
	Client *clientv3.Client
	// Prefix of every key (default DefaultPrefix).
	Prefix string
	// Now is the clock the rate limit and the records use (default time.Now).
	Now func() time.Time
}

// Control reads and changes the routing control.
type Control struct {
	cli    *clientv3.Client
	prefix string
	now    func() time.Time
}

// New returns a Control.
func New(cfg Config) (*Control, error) {
	if cfg.Client == nil {
		return nil, errors.New("routing control: no etcd client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Control{cli: cfg.Client, prefix: cfg.Prefix, now: cfg.Now}, nil
}

func (c *Control) signalKey() string { return c.prefix + "signal" }
func (c *Control) auditPrefix() string {
	return c.prefix + "audit/"
}

// Read returns the signal and the revision it was read at (a linearizable read: it fails
// when the cluster has no quorum). A cluster never written holds an empty signal.
func (c *Control) Read(ctx context.Context) (apiv1.RoutingSignal, int64, error) {
	resp, err := c.cli.Get(ctx, c.signalKey())
	if err != nil {
		return apiv1.RoutingSignal{}, 0, fmt.Errorf("read the routing control: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}, resp.Header.Revision, nil
	}
	s, err := decode(resp.Kvs[0].Value)
	return s, resp.Header.Revision, err
}

func decode(b []byte) (apiv1.RoutingSignal, error) {
	var s apiv1.RoutingSignal
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("the routing control's signal is not valid JSON: %w", err)
	}
	if s.Regions == nil {
		s.Regions = map[string]apiv1.RegionSwitch{}
	}
	return s, nil
}

// Change is one operator action.
type Change struct {
	Region string
	// On switches the region on; else off.
	On     bool
	Reason string
	// By is who asks (the identity of the credentials used).
	By string
	// Force switches off below min_regions_on (never the last region on).
	Force bool
}

// Settings are the signal's safety settings.
type Settings struct {
	MinRegionsOn      int
	ChangeMinInterval time.Duration
	Reason, By        string
}

var regionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidRegion says whether name can name a region: a DNS label.
func ValidRegion(name string) error {
	if !regionName.MatchString(name) {
		return fmt.Errorf("region %q: want a DNS label (lower-case letters, digits, '-')", name)
	}
	return nil
}

// Set applies ch in one transaction with its safety rules and its audit record: a refusal
// is an *apiv1.Error (REGION_UNSAFE, UNKNOWN_REGION, RATE_LIMITED, INVALID_REQUEST) and
// is audited like a success. It returns the region's switch after the change.
func (c *Control) Set(ctx context.Context, ch Change) (apiv1.RegionSwitch, error) {
	action := apiv1.RegionOff
	if ch.On {
		action = apiv1.RegionOn
	}
	rec := apiv1.RegionAudit{By: ch.By, Region: ch.Region, Action: action, Reason: ch.Reason, Force: ch.Force}
	if err := ValidRegion(ch.Region); err != nil {
		return apiv1.RegionSwitch{}, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "%v", err)
	}
	if strings.TrimSpace(ch.Reason) == "" {
		return apiv1.RegionSwitch{}, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "a reason is required: it is kept with the change")
	}
	for range 10 { // a concurrent change of the signal: read again and decide again
		resp, err := c.cli.Get(ctx, c.signalKey())
		if err != nil {
			return apiv1.RegionSwitch{}, fmt.Errorf("read the routing control: %w", err)
		}
		sig := apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}
		var modRev int64
		if len(resp.Kvs) > 0 {
			if sig, err = decode(resp.Kvs[0].Value); err != nil {
				return apiv1.RegionSwitch{}, err
			}
			modRev = resp.Kvs[0].ModRevision
		}
		now := c.now().UTC()
		rec.At = now
		next, outcome, refusal := decide(sig, ch, now)
		if refusal != nil {
			rec.Outcome, rec.Code, rec.Message = "refused", refusal.Code, refusal.Message
			if err := c.audit(ctx, rec); err != nil {
				return apiv1.RegionSwitch{}, fmt.Errorf("%w (and its audit record was not written: %w)", refusal, err)
			}
			return sig.Regions[ch.Region], refusal
		}
		rec.Outcome = outcome
		if outcome == "unchanged" {
			if err := c.audit(ctx, rec); err != nil {
				return apiv1.RegionSwitch{}, err
			}
			return sig.Regions[ch.Region], nil
		}
		ok, err := c.commit(ctx, modRev, next, rec)
		if err != nil {
			return apiv1.RegionSwitch{}, err
		}
		if ok {
			return next.Regions[ch.Region], nil
		}
	}
	return apiv1.RegionSwitch{}, apiv1.Errorf(http.StatusConflict, apiv1.CodeUnavailable, "the routing control changed under every attempt; try again")
}

// decide applies ch to sig at now: the new signal and "done" or "unchanged", or a refusal.
func decide(sig apiv1.RoutingSignal, ch Change, now time.Time) (apiv1.RoutingSignal, string, *apiv1.Error) {
	cur, known := sig.Regions[ch.Region]
	want := apiv1.RegionOff
	if ch.On {
		want = apiv1.RegionOn
	}
	if !ch.On && !known {
		return sig, "", apiv1.Errorf(http.StatusNotFound, apiv1.CodeUnknownRegion,
			"the routing control holds no region %q (it holds %s): declare it with `meshflows region on %s` first",
			ch.Region, orNone(slices.Sorted(maps.Keys(sig.Regions))), ch.Region)
	}
	if known && cur.State == want {
		return sig, "unchanged", nil
	}
	interval := time.Duration(sig.ChangeMinIntervalSeconds) * time.Second
	if interval == 0 {
		interval = DefaultChangeMinInterval
	}
	if known && now.Sub(cur.At) < interval {
		wait := interval - now.Sub(cur.At)
		e := apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
			"region %s changed %s ago (%s, by %s): at most one change per region every %s; try again in %s",
			ch.Region, now.Sub(cur.At).Truncate(time.Second), cur.State, cur.By, interval, wait.Round(time.Second))
		e.RetryAfter = int(wait/time.Second) + 1
		return sig, "", e
	}
	if !ch.On {
		minOn := sig.MinRegionsOn
		if minOn == 0 {
			minOn = DefaultMinRegionsOn
		}
		var left []string
		for name, r := range sig.Regions {
			if name != ch.Region && r.State == apiv1.RegionOn {
				left = append(left, name)
			}
		}
		slices.Sort(left)
		switch {
		case len(left) == 0:
			return sig, "", apiv1.Errorf(http.StatusConflict, apiv1.CodeRegionUnsafe,
				"region %s is the last region on: switching it off would leave no region to send traffic to (--force never does this)", ch.Region)
		case len(left) < minOn && !ch.Force:
			return sig, "", apiv1.Errorf(http.StatusConflict, apiv1.CodeRegionUnsafe,
				"switching region %s off would leave %d region(s) on (%s), fewer than min_regions_on %d: add --force to do it anyway",
				ch.Region, len(left), strings.Join(left, ", "), minOn)
		}
	}
	next := sig
	next.Regions = maps.Clone(sig.Regions)
	sw := apiv1.RegionSwitch{State: want, Reason: ch.Reason, By: ch.By, At: now}
	if known && want == apiv1.RegionOn {
		sw.ReturnedAt = now
	}
	next.Regions[ch.Region] = sw
	return next, "done", nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// Configure changes the safety settings, audited.
func (c *Control) Configure(ctx context.Context, s Settings) error {
	if s.MinRegionsOn < 1 || s.ChangeMinInterval < 0 {
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "min_regions_on must be at least 1 and the change interval not negative")
	}
	if strings.TrimSpace(s.Reason) == "" {
		return apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "a reason is required: it is kept with the change")
	}
	for range 10 {
		resp, err := c.cli.Get(ctx, c.signalKey())
		if err != nil {
			return fmt.Errorf("read the routing control: %w", err)
		}
		sig := apiv1.RoutingSignal{Regions: map[string]apiv1.RegionSwitch{}}
		var modRev int64
		if len(resp.Kvs) > 0 {
			modRev = resp.Kvs[0].ModRevision
			if sig, err = decode(resp.Kvs[0].Value); err != nil {
				return err
			}
		}
		sig.MinRegionsOn = s.MinRegionsOn
		sig.ChangeMinIntervalSeconds = int64(s.ChangeMinInterval / time.Second)
		rec := apiv1.RegionAudit{At: c.now().UTC(), By: s.By, Action: "configure", Reason: s.Reason, Outcome: "done",
			Message: fmt.Sprintf("min_regions_on %d, change_min_interval %s", s.MinRegionsOn, s.ChangeMinInterval)}
		ok, err := c.commit(ctx, modRev, sig, rec)
		if err != nil || ok {
			return err
		}
	}
	return apiv1.Errorf(http.StatusConflict, apiv1.CodeUnavailable, "the routing control changed under every attempt; try again")
}

// commit writes next and rec if the signal is still at modRev (0: absent).
func (c *Control) commit(ctx context.Context, modRev int64, next apiv1.RoutingSignal, rec apiv1.RegionAudit) (bool, error) {
	b, err := json.Marshal(next)
	if err != nil {
		return false, err
	}
	ab, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(c.signalKey()), "=", modRev)).
		Then(clientv3.OpPut(c.signalKey(), string(b)), clientv3.OpPut(c.auditKey(rec.At), string(ab))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("write the routing control: %w", err)
	}
	return resp.Succeeded, nil
}

func (c *Control) audit(ctx context.Context, rec apiv1.RegionAudit) error {
	ab, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := c.cli.Put(ctx, c.auditKey(rec.At), string(ab)); err != nil {
		return fmt.Errorf("write the routing control's audit record: %w", err)
	}
	return nil
}

// auditKey orders records by time; a random suffix keeps two of one instant apart.
func (c *Control) auditKey(at time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return c.auditPrefix() + at.UTC().Format("20060102T150405.000000000Z") + "-" + hex.EncodeToString(b[:])
}

// Audit returns the last n records, oldest first.
func (c *Control) Audit(ctx context.Context, n int) ([]apiv1.RegionAudit, error) {
	resp, err := c.cli.Get(ctx, c.auditPrefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, fmt.Errorf("read the routing control's audit: %w", err)
	}
	out := make([]apiv1.RegionAudit, 0, len(resp.Kvs))
	for _, kv := range slices.Backward(resp.Kvs) {
		var r apiv1.RegionAudit
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("audit record %s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Status is the signal and its last audit records.
func (c *Control) Status(ctx context.Context, audit int) (apiv1.RegionStatus, error) {
	sig, rev, err := c.Read(ctx)
	if err != nil {
		return apiv1.RegionStatus{}, err
	}
	st := apiv1.RegionStatus{Revision: rev, Regions: sig.Regions, On: []string{}, Off: []string{}, MinOn: sig.MinRegionsOn,
		Interval: sig.ChangeMinIntervalSeconds}
	if st.MinOn == 0 {
		st.MinOn = DefaultMinRegionsOn
	}
	if st.Interval == 0 {
		st.Interval = int64(DefaultChangeMinInterval / time.Second)
	}
	for _, name := range slices.Sorted(maps.Keys(sig.Regions)) {
		if sig.Regions[name].State == apiv1.RegionOff {
			st.Off = append(st.Off, name)
		} else {
			st.On = append(st.On, name)
		}
	}
	if audit > 0 {
		if st.Audit, err = c.Audit(ctx, audit); err != nil {
			return st, err
		}
	}
	return st, nil
}
