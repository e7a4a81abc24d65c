package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/httpapi"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/incident"
	"github.com/meshflows/meshflows/internal/registry"
)

// register is registerOnce, counting every refusal in register_fail_total: those of the
// registry count themselves, those before it (a body too large, malformed JSON, a
// duplicate key, a wrong type, a rate limit, a shape or a permission the server checks)
// are counted here, by reason.
func (s *Server) register(w http.ResponseWriter, r *http.Request) (any, error) {
	out, counted, err := s.registerOnce(w, r)
	if err != nil && !counted {
		s.reg.RegisterRefused(refusalReason(err))
	}
	return out, err
}

// refusalReason is the register_fail_total reason of a refusal.
func refusalReason(err error) string {
	var ae *apiv1.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return "too_large"
	case !errors.As(err, &ae):
		return "invalid"
	}
	switch ae.Status {
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusTooManyRequests:
		return "rate_limited"
	case http.StatusForbidden, http.StatusUnauthorized:
		return "forbidden"
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		return "store"
	}
	return "invalid"
}

// registerOnce registers; counted says the registry counted its refusal itself.
func (s *Server) registerOnce(w http.ResponseWriter, r *http.Request) (any, bool, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, false, err
	}
	var req apiv1.RegisterRequest
	plain := parseRegistration(body, &req) // no unknown field in it then: no warning to look for
	if !plain {
		if err := decodeJSON(body, &req); err != nil {
			return nil, false, err
		}
	}
	noteInstance(r.Context(), req.InstanceID)
	if c := registry.CallerFrom(r.Context()); c.Identity != "" {
		if s.cfg.Limiter != nil {
			if ok, after := s.cfg.Limiter.Allow(c.Identity); !ok {
				return nil, false, apiv1.Errorf(http.StatusTooManyRequests, apiv1.CodeRateLimited,
					"identity %q is over its registration rate; retry in %s", c.Identity, after).WithRetryAfter(after)
			}
		}
		// Shape first (400 with every problem), then permission (403 with every offence).
		if err := req.Validate(); err != nil {
			return nil, false, err
		}
		if err := s.cfg.Policy.CanRegister(c.Identity, &req); err != nil {
			return nil, false, err
		}
	}
	resp, err := s.reg.Register(r.Context(), &req)
	if err != nil {
		return nil, true, err
	}
	if !plain {
		if ws := apiv1.UnknownFieldsOfDecoded(body, &req); len(ws) > 0 {
			resp.Warnings = ws
			paths := make([]string, len(ws))
			for i, w := range ws {
				paths[i] = w.Path
			}
			s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "registration with fields the contract does not define; ignored",
				slog.String("instance_id", req.InstanceID), slog.Any("fields", paths))
		}
	}
	out, ok := appendRegisterAnswer(make([]byte, 0, 192), resp)
	if !ok {
		return resp, true, nil
	}
	return answerJSON(out), true, nil
}

func (s *Server) deregister(_ http.ResponseWriter, r *http.Request) (any, error) {
	var gen int64
	if g := r.URL.Query().Get("generation"); g != "" {
		v, err := strconv.ParseInt(g, 10, 64)
		if err != nil || v < 1 {
			return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "generation", Message: fmt.Sprintf("must be an integer >= 1, got %q", g)}})
		}
		gen = v
	}
	return nil, s.reg.Deregister(r.Context(), r.PathValue("instance_id"), gen)
}

// catalogKey names the catalog's listings in the page store.
const catalogKey = " services"

func (s *Server) catalog(w http.ResponseWriter, r *http.Request) (any, error) {
	v := r.URL.Query()
	if err := registry.UnknownParameters(v, registry.CatalogListing); err != nil {
		return nil, err
	}
	pg, paged, err := parsePaging(v, catalogKey)
	if err != nil {
		return nil, err
	}
	if !paged {
		return s.writeCatalog(w)
	}
	// The listing holds the revision's records (a pointer each: 8 MB at a million instances,
	// where their wire forms took some 500 MB), and each page makes its own instances, with
	// their leases and verdicts as they are when the page is asked for, as the whole catalog
	// has them.
	return s.page(catalogKey, pg, func() *listing {
		st, recs := s.reg.CatalogRecords()
		return &listing{state: st, items: recs, n: len(recs)}
	}, func(l *listing, from, to int, next string) (any, error) {
		recs := l.items.([]*registry.Record)[from:to]
		page := make([]apiv1.Instance, len(recs))
		for i, rec := range recs {
			page[i] = s.reg.Wire(rec)
		}
		return catalogJSON(&apiv1.CatalogResponse{RegistryEpoch: l.state.Epoch, Region: l.state.Region, Revision: l.state.Revision, Instances: page, NextPageToken: next})
	})
}

// Defaults of GET /v1/catalog/summary.
const (
	// DefaultSummaryLimit is how many instances a summary lists without limit.
	DefaultSummaryLimit = 100
	// DefaultExpiringWithin is the summary's expiring_within without one: one heartbeat
	// interval of the SDK's default.
	DefaultExpiringWithin = 30 * time.Second
)

// catalogSummary answers GET /v1/catalog/summary (Registry.Summary): what a console shows of
// the catalog, whatever its size.
func (s *Server) catalogSummary(_ http.ResponseWriter, r *http.Request) (any, error) {
	v := r.URL.Query()
	if err := registry.UnknownParameters(v, registry.SummaryListing); err != nil {
		return nil, err
	}
	q := registry.SummaryQuery{ServiceName: v.Get("service_name"), CapabilityID: v.Get("capability_id"), Provider: v.Get("provider"),
		ExpiringWithin: DefaultExpiringWithin, Limit: DefaultSummaryLimit}
	var ds []apiv1.Detail
	if ls := v.Get("limit"); ls != "" {
		var bad []apiv1.Detail
		q.Limit, bad = parseLimit(ls, 0)
		ds = append(ds, bad...)
	}
	if ws := v.Get("expiring_within"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			ds = append(ds, apiv1.Detail{Path: "expiring_within", Message: fmt.Sprintf("must be a duration >= 0 such as 30s, got %q", ws)})
		}
		q.ExpiringWithin = d
	}
	if len(ds) > 0 {
		return nil, apiv1.InvalidRequest(ds)
	}
	out := s.reg.Summary(q)
	return &out, nil
}

// catalogJSON writes a page of the catalog without encoding/json's reflection
// (apijson.Catalog).
func catalogJSON(c *apiv1.CatalogResponse) (any, error) {
	b, err := apijson.Catalog(nil, c)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	return answerJSON(b), nil
}

// writeCatalog answers the whole catalog as it is made (Registry.CatalogStream, apijson.List),
// never holding it whole (a million instances are about 700 MB of JSON): a catalog that fits
// in one piece (apijson.Chunk) goes out whole, with its Content-Length, a larger one as it is
// made.
func (s *Server) writeCatalog(w http.ResponseWriter) (any, error) {
	head, _, all := s.reg.CatalogStream()
	streaming, gone := false, false
	b, err := apijson.List(apijson.CatalogHead(make([]byte, 0, apijson.Chunk+4096), &head), all, 0, apijson.InstanceValue,
		func(piece []byte) ([]byte, error) {
			if !streaming {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusOK)
				streaming = true
			}
			_, err := w.Write(piece)
			gone = err != nil
			return piece[:0], err
		})
	switch {
	case gone:
		return written{}, nil // the client went
	case err != nil && streaming:
		// The status is sent: end the connection, so that the client sees the answer cut
		// short rather than a JSON that ends well.
		panic(http.ErrAbortHandler)
	case err != nil:
		return nil, fmt.Errorf("encode answer: %w", err)
	case !streaming:
		return answerJSON(apijson.CatalogTail(b, &head)), nil
	}
	w.Write(apijson.CatalogTail(b, &head))
	return written{}, nil
}

func (s *Server) instance(_ http.ResponseWriter, r *http.Request) (any, error) {
	in, err := s.reg.Instance(r.PathValue("instance_id"))
	if err != nil {
		return nil, err
	}
	b, err := apijson.Instance(nil, &in)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	return answerJSON(append(b, '\n')), nil
}

// longPoll reads index and wait and, when an index is given, waits for a change of topic past
// it (registry.WaitOn), then, when the answer to key (of endpoint) is costly to build, until
// its next build is due (space). A listing read a page at a time passes no key: it is never
// held.
func (s *Server) longPoll(ctx context.Context, v url.Values, endpoint string, topic registry.Topic, key string) error {
	is := v.Get("index")
	if is == "" {
		return nil
	}
	var ds []apiv1.Detail
	index, err := strconv.ParseInt(is, 10, 64)
	if err != nil || index < 0 {
		ds = append(ds, apiv1.Detail{Path: "index", Message: fmt.Sprintf("must be an integer >= 0, got %q", is)})
	}
	wait := DefaultWait
	if ws := v.Get("wait"); ws != "" {
		wait, err = time.ParseDuration(ws)
		if err != nil || wait <= 0 {
			ds = append(ds, apiv1.Detail{Path: "wait", Message: fmt.Sprintf("must be a positive duration like 30s, got %q", ws)})
		}
		wait = min(wait, MaxWait)
	}
	if len(ds) > 0 {
		return apiv1.InvalidRequest(ds)
	}
	if err := s.reg.AdmitWatch(v.Get("epoch"), index); err != nil {
		return err
	}
	end := s.cfg.Now().Add(wait)
	s.reg.WaitOn(ctx, topic, v.Get("epoch"), index, wait)
	if key != "" {
		s.space(ctx, endpoint, key, end)
	}
	s.reg.Answered(v.Get("epoch"), index)
	return nil
}

// space holds a long poll that would have the answer to key built anew until that build is
// due (Config.PollSpacing), never past end, the end of the poll's wait: the changes that
// come meanwhile are in the answer it then gets.
func (s *Server) space(ctx context.Context, endpoint, key string, end time.Time) {
	due, ok := s.cache.nextBuild(key, s.reg.State(), s.cfg.PollSpacing)
	if !ok {
		return
	}
	if due.After(end) {
		due = end
	}
	if d := due.Sub(s.cfg.Now()); d > 0 {
		s.metrics.held.WithLabelValues(endpoint).Observe(d.Seconds())
		s.cfg.Sleep(ctx, d)
	}
}

// parseDelta reads delta=true|false: a delta watch needs an index and is not paged.
func parseDelta(v url.Values, paged bool) (bool, error) {
	ds := v.Get("delta")
	if ds == "" {
		return false, nil
	}
	delta, err := strconv.ParseBool(ds)
	switch {
	case err != nil:
		return false, apiv1.InvalidRequest([]apiv1.Detail{{Path: "delta", Message: fmt.Sprintf("must be true or false, got %q", ds)}})
	case delta && v.Get("index") == "":
		return false, apiv1.InvalidRequest([]apiv1.Detail{{Path: "delta", Message: "a delta watch needs index: the revision of the answer it holds (0 for none: the first answer is a reset)"}})
	case delta && paged:
		return false, apiv1.InvalidRequest([]apiv1.Detail{{Path: "delta", Message: "a delta watch is not paged: drop limit and page_token"}})
	}
	return delta, nil
}

func (s *Server) capabilities(w http.ResponseWriter, r *http.Request) (any, error) {
	d, pg, paged, err := s.parseDiscovery(r)
	if err != nil {
		return nil, err
	}
	v, q, key := d.v, d.q, d.key
	delta, err := parseDelta(v, paged)
	if err != nil {
		return nil, err
	}
	spaced := key
	if paged || delta {
		// a listing is read a page at a time, a delta costs the instances that changed: never
		// held for the cost of building the whole answer
		spaced = ""
	}
	if err := s.longPoll(r.Context(), v, "capabilities", registry.TopicOf(q), spaced); err != nil {
		return nil, err
	}
	if delta {
		start := time.Now()
		defer func() { s.metrics.discovery.WithLabelValues("capabilities").Observe(time.Since(start).Seconds()) }()
		index, _ := strconv.ParseInt(v.Get("index"), 10, 64) // longPoll checked it
		return s.deltaAnswer(w, key, q, index, v.Get("epoch"))
	}
	start := time.Now()
	defer func() { s.metrics.discovery.WithLabelValues("capabilities").Observe(time.Since(start).Seconds()) }()
	if paged {
		// The listing holds the answer's entries (48 bytes each: the record, the capability,
		// the verdict), and each page makes its own wire forms, with the leases and health as
		// they are when the page is read; the wire forms of an unfiltered answer at a million
		// instances would be some 900 MB held between pages.
		return s.page(key, pg, func() *listing {
			s.metrics.encodes.WithLabelValues("capabilities").Inc()
			ans := s.reg.Query(q)
			return &listing{state: ans.State, items: ans.Entries, n: len(ans.Entries), removed: ans.Removed}
		}, func(l *listing, from, to int, next string) (any, error) {
			entries := l.items.([]registry.Entry)[from:to]
			page := make([]apiv1.CapabilityEntry, len(entries))
			for i, e := range entries {
				page[i] = e.Wire()
			}
			return apiv1.DiscoveryResponse{RegistryEpoch: l.state.Epoch, Region: l.state.Region, Revision: l.state.Revision, Complete: l.state.Complete,
				Capabilities: page, Removed: l.removed, NextPageToken: next}, nil
		})
	}
	return s.cache.load(key, s.reg.State(), func() (*encoded, error) {
		s.metrics.encodes.WithLabelValues("capabilities").Inc()
		ans := s.reg.Query(q)
		if max := s.cfg.MaxAnswerInstances; max > 0 && q.CapabilityID == "" && q.ServiceName == "" && len(ans.Entries) > max {
			return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "limit", Message: fmt.Sprintf(
				"an answer without capability_id or service_name holds %d entries, over the %d the registry sends whole (--max-answer-instances): page it with limit (at most %d) and page_token, narrow it with capability_id or service_name, or watch it with delta=true",
				len(ans.Entries), max, apiv1.MaxLimit)}})
		}
		e, err := encodeDiscovery(&ans, s.cfg.GzipMinBytes, acceptsGzip(r.Header.Get("Accept-Encoding")))
		if err != nil {
			return nil, fmt.Errorf("encode discovery answer: %w", err)
		}
		return e, nil
	})
}

// routesKey is the answer cache's key of /v1/discovery/routes; it cannot collide with a
// canonical query, which never starts with a space.
const routesKey = " routes"

func (s *Server) discoveryRoutes(w http.ResponseWriter, r *http.Request) (any, error) {
	v := r.URL.Query()
	if err := registry.UnknownParameters(v, registry.RoutesListing); err != nil {
		return nil, err
	}
	delta, err := parseDelta(v, false)
	if err != nil {
		return nil, err
	}
	spaced := routesKey
	if delta {
		spaced = "" // a delta costs the instances that changed
	}
	if err := s.longPoll(r.Context(), v, "routes", registry.RoutesTopic, spaced); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { s.metrics.discovery.WithLabelValues("routes").Observe(time.Since(start).Seconds()) }()
	if delta {
		index, _ := strconv.ParseInt(v.Get("index"), 10, 64) // longPoll checked it
		return s.routesDeltaAnswer(w, index, v.Get("epoch"))
	}
	return s.cache.load(routesKey, s.reg.State(), func() (*encoded, error) {
		s.metrics.encodes.WithLabelValues("routes").Inc()
		resp := s.reg.Routes()
		e, err := newEncoded(registry.State{Epoch: resp.RegistryEpoch, Revision: resp.Revision, Complete: resp.Complete, Region: resp.Region}, resp)
		if err != nil {
			return nil, fmt.Errorf("encode routes answer: %w", err)
		}
		return e, nil
	})
}

func (s *Server) discoveryHealth(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return s.reg.Health(s.startedAt), nil
}

func (s *Server) snapshot(_ http.ResponseWriter, r *http.Request) (any, error) {
	return s.reg.WriteSnapshot(r.Context())
}

// metricsHistory answers GET /v1/metrics/history.
func (s *Server) metricsHistory(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := registry.UnknownParameters(r.URL.Query(), registry.NoParameters); err != nil {
		return nil, err
	}
	if s.cfg.History == nil {
		return nil, apiv1.Errorf(http.StatusNotImplemented, apiv1.CodeUnavailable, "this registry keeps no metrics history")
	}
	return s.cfg.History.Snapshot(), nil
}

func (s *Server) healthz(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return map[string]string{"status": "ok"}, nil
}

func (s *Server) readyz(_ http.ResponseWriter, r *http.Request) (any, error) {
	if p, ok := s.reg.Store().(registry.Pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			return nil, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "store %s unreachable: %v", s.reg.Store().Name(), err)
		}
	}
	return map[string]string{"status": "ready", "store": s.reg.Store().Name()}, nil
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.AckRequest
	if err := s.decode(w, r, &req); err != nil {
		return nil, err
	}
	return s.reg.Ack(r.Context(), &req)
}

func (s *Server) withdrawal(_ http.ResponseWriter, r *http.Request) (any, error) {
	g, err := strconv.ParseInt(r.URL.Query().Get("generation"), 10, 64)
	if err != nil || g < 1 {
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "generation", Message: "the generation that was deregistered is required"}})
	}
	return s.reg.Withdrawal(r.PathValue("instance_id"), g)
}

func (s *Server) eligibility(_ http.ResponseWriter, r *http.Request) (any, error) {
	return s.reg.Explain(r.PathValue("instance_id"))
}

func (s *Server) outcomes(w http.ResponseWriter, r *http.Request) (any, error) {
	var req apiv1.OutcomesRequest
	if err := s.decode(w, r, &req); err != nil {
		return nil, err
	}
	return s.reg.Outcomes(r.Context(), &req)
}

// timeline answers the eligibility timeline, as JSON or (?format=csv) one row per
// capability and slice.
func (s *Server) timeline(w http.ResponseWriter, r *http.Request) (any, error) {
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "csv" {
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "format", Message: fmt.Sprintf("must be json or csv, got %q", format)}})
	}
	tl, err := s.reg.Timeline()
	if err != nil || format != "csv" {
		return tl, err
	}
	err = httpapi.WriteCSV(w, "meshflows-eligibility-timeline.csv", []string{"capability_id", "slice_start", "level", "instances", "min_in_rotation"},
		func(emit func(...string)) {
			for _, c := range tl.Capabilities {
				for _, b := range c.Buckets {
					emit(c.CapabilityID, b.Start.UTC().Format(time.RFC3339), b.Level, strconv.Itoa(b.Instances), strconv.Itoa(b.MinInRotation))
				}
			}
		})
	if err != nil {
		s.cfg.Logger.Warn("writing the timeline CSV failed", "error", err)
	}
	return written{}, nil
}

// errNoIncidents: the registry runs without the eligibility engine, which raises incidents.
var errNoIncidents = apiv1.Errorf(http.StatusNotImplemented, apiv1.CodeUnavailable, "the registry runs without the eligibility engine, which raises incidents")

func (s *Server) incidents(_ http.ResponseWriter, r *http.Request) (any, error) {
	if s.cfg.Incidents == nil {
		return nil, errNoIncidents
	}
	status := r.URL.Query().Get("status")
	switch status {
	case "", "unresolved", apiv1.IncidentOpen, apiv1.IncidentAcknowledged, apiv1.IncidentResolved, apiv1.IncidentIgnored:
	default:
		return nil, apiv1.InvalidRequest([]apiv1.Detail{{Path: "status", Message: fmt.Sprintf("must be open, acknowledged, resolved, ignored or unresolved, got %q", status)}})
	}
	return apiv1.IncidentsResponse{Incidents: s.cfg.Incidents.List(status)}, nil
}

// incidentAction acknowledges, resolves or ignores an incident, with an optional body
// {"comment": "..."}: an admin may act on any, an owner on those raised for it.
func (s *Server) incidentAction(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.cfg.Incidents == nil {
		return nil, errNoIncidents
	}
	var req apiv1.IncidentActionRequest
	if r.ContentLength != 0 {
		if err := s.decodeStrict(w, r, &req); err != nil {
			return nil, err
		}
	}
	id := r.PathValue("incident_id")
	by, err := s.mayActOn(r, id)
	if err != nil {
		return nil, err
	}
	return s.cfg.Incidents.Act(id, r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:], by, req.Comment)
}

// mayActOn returns who acts on incident id, or why they may not.
func (s *Server) mayActOn(r *http.Request, id string) (string, error) {
	in, err := s.cfg.Incidents.Get(id)
	if err != nil {
		return "", err
	}
	c := registry.CallerFrom(r.Context())
	if s.cfg.Authenticator == nil {
		if viewer := r.Header.Get(apiv1.HeaderActingFor); viewer != "" {
			return viewer + " (open mode)", nil
		}
		return "anonymous (open mode)", nil
	}
	identity, admin, by, err := s.actingAs(r, c)
	if err != nil {
		return "", err
	}
	if !admin && (in.Owner == "" || in.Owner != identity) {
		return "", apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden, "identity %q may not act on incident %s: it is neither an admin nor the incident's owner", identity, id)
	}
	return by, nil
}

// actingAs is who a request acts as on an incident: the caller, or — from a delegator (the
// console's identity) naming one in apiv1.HeaderActingFor — the viewer it acts for, judged
// by the viewer's own roles (or as an admin when the delegator says it signed in with the
// admin token); by is what the incident records.
func (s *Server) actingAs(r *http.Request, c registry.Caller) (identity string, admin bool, by string, err error) {
	viewer := r.Header.Get(apiv1.HeaderActingFor)
	if viewer == "" {
		return c.Identity, c.Admin, c.Identity, nil
	}
	if !slices.Contains(s.cfg.Delegators, c.Identity) {
		return "", false, "", apiv1.Errorf(http.StatusForbidden, apiv1.CodeForbidden,
			"identity %q may not act on behalf of another (%s): only the console's identity (--console-identity) may", c.Identity, apiv1.HeaderActingFor)
	}
	admin = s.cfg.Policy.IsAdmin(viewer) || r.Header.Get(apiv1.HeaderActingAdmin) == "true"
	return viewer, admin, viewer + " (through " + c.Identity + ")", nil
}

// maxBulk bounds the incidents of one bulk acknowledgement.
const maxBulk = 500

// bulkAcknowledge acknowledges every incident of the body's ids. It checks them all first:
// one unknown or forbidden id refuses the whole request (nothing half done).
func (s *Server) bulkAcknowledge(w http.ResponseWriter, r *http.Request) (any, error) {
	if s.cfg.Incidents == nil {
		return nil, errNoIncidents
	}
	var req apiv1.BulkAcknowledgeRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		return nil, err
	}
	var ds []apiv1.Detail
	switch {
	case len(req.IDs) == 0:
		ds = append(ds, apiv1.Detail{Path: "ids", Message: "name at least one incident"})
	case len(req.IDs) > maxBulk:
		ds = append(ds, apiv1.Detail{Path: "ids", Message: fmt.Sprintf("at most %d incidents at once, got %d", maxBulk, len(req.IDs))})
	}
	if len(req.Comment) > incident.MaxComment {
		ds = append(ds, apiv1.Detail{Path: "comment", Message: fmt.Sprintf("at most %d bytes", incident.MaxComment)})
	}
	if len(ds) > 0 {
		return nil, apiv1.InvalidRequest(ds)
	}
	by := ""
	for _, id := range req.IDs {
		b, err := s.mayActOn(r, id)
		if err != nil {
			return nil, err
		}
		by = b
	}
	out := apiv1.IncidentsResponse{Incidents: []apiv1.Incident{}}
	for _, id := range req.IDs {
		in, err := s.cfg.Incidents.Act(id, apiv1.IncidentActionAcknowledge, by, req.Comment)
		if err != nil {
			return nil, err
		}
		out.Incidents = append(out.Incidents, in)
	}
	return out, nil
}
