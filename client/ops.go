package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// The typed operations. Paths come from api/v1; each method sends one request with the
// client's Timeout and decodes the answer.

// ErrEncode: a request body could not be encoded as JSON (nothing was sent).
var ErrEncode = errors.New("request body cannot be encoded as JSON")

// call sends a JSON body (v marshalled, when not nil) to path and decodes the answer into out.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, v any, out any) error {
	var body []byte
	if v != nil {
		var err error
		if body, err = json.Marshal(v); err != nil {
			return fmt.Errorf("%w: %v", ErrEncode, err)
		}
	}
	return c.Do(ctx, Request{Method: method, Path: path, Query: query, Body: body, Timeout: c.cfg.Timeout}, out)
}

// Register registers (or replaces) an instance.
func (c *Client) Register(ctx context.Context, req *apiv1.RegisterRequest) (*apiv1.RegisterResponse, error) {
	var out apiv1.RegisterResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.PathRegister, nil, req, &out)
}

// Heartbeat renews the lease of the incarnation req names.
func (c *Client) Heartbeat(ctx context.Context, instanceID string, req *apiv1.HeartbeatRequest) (*apiv1.HeartbeatResponse, error) {
	var out apiv1.HeartbeatResponse
	return &out, c.call(ctx, http.MethodPut, apiv1.HeartbeatPath(instanceID), nil, req, &out)
}

// Deregister removes an instance; a generation > 0 fences it to that incarnation.
func (c *Client) Deregister(ctx context.Context, instanceID string, generation int64) error {
	var q url.Values
	if generation > 0 {
		q = apiv1.GenerationQuery(generation)
	}
	return c.call(ctx, http.MethodDelete, apiv1.InstancePath(instanceID), q, nil, nil)
}

// Withdrawal asks whether the gateways have withdrawn a deregistered incarnation.
func (c *Client) Withdrawal(ctx context.Context, instanceID string, generation int64) (*apiv1.WithdrawalResponse, error) {
	var out apiv1.WithdrawalResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.WithdrawalPath(instanceID), apiv1.GenerationQuery(generation), nil, &out)
}

// Page asks for one page of a listing: at most Limit items (0: the whole listing), after
// the page Token names.
type Page struct {
	Limit int
	Token string
}

func (p Page) set(q url.Values) url.Values {
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Token != "" {
		q.Set("page_token", p.Token)
	}
	return q
}

// Services lists the catalog (one page of it with p.Limit).
func (c *Client) Services(ctx context.Context, p Page) (*apiv1.CatalogResponse, error) {
	var out apiv1.CatalogResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathServices, p.set(url.Values{}), nil, &out)
}

// SummaryQuery asks for a catalog summary: the filters (each optional; an instance matches
// when its service name and one of its capabilities match every one set), the window within
// which a lease counts as expiring soon (0: the registry's default, 30 s), and the most
// instances to list (0: the registry's default, 100).
type SummaryQuery struct {
	ServiceName, CapabilityID, Provider string
	ExpiringWithin                      time.Duration
	Limit                               int
}

// CatalogSummary counts the catalog and lists the first instances q keeps
// (GET /v1/catalog/summary): what to ask of a catalog too large to read whole.
func (c *Client) CatalogSummary(ctx context.Context, q SummaryQuery) (*apiv1.CatalogSummary, error) {
	v := url.Values{}
	for k, s := range map[string]string{"service_name": q.ServiceName, "capability_id": q.CapabilityID, "provider": q.Provider} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.ExpiringWithin > 0 {
		v.Set("expiring_within", q.ExpiringWithin.String())
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out apiv1.CatalogSummary
	return &out, c.call(ctx, http.MethodGet, apiv1.PathCatalogSummary, v, nil, &out)
}

// Instance returns the catalog entry of one instance.
func (c *Client) Instance(ctx context.Context, instanceID string) (*apiv1.Instance, error) {
	var out apiv1.Instance
	return &out, c.call(ctx, http.MethodGet, apiv1.InstancePath(instanceID), nil, nil, &out)
}

// Poll makes a discovery request a long poll: it is held until the registry's revision
// passes Index (in Epoch), or Wait passes. The zero Poll asks at once.
type Poll struct {
	Epoch string
	Index int64
	Wait  time.Duration
}

func (p Poll) request(path string, q url.Values, timeout time.Duration) Request {
	r := Request{Method: http.MethodGet, Path: path, Query: q, Timeout: timeout}
	if p.Wait > 0 {
		if p.Epoch != "" {
			q.Set("epoch", p.Epoch)
		}
		q.Set("index", strconv.FormatInt(p.Index, 10))
		q.Set("wait", p.Wait.String())
		r.Timeout += p.Wait
	}
	return r
}

// Capabilities queries discovery with the selecting parameters q (capability_id, provider,
// version, min_version, service_name, zone, include; limit and page_token to page).
func (c *Client) Capabilities(ctx context.Context, q url.Values, p Poll) (*apiv1.DiscoveryResponse, error) {
	var out apiv1.DiscoveryResponse
	return &out, c.Do(ctx, p.request(apiv1.PathCapabilities, cloneValues(q), c.cfg.Timeout), &out)
}

// CapabilitiesDelta is Capabilities as a delta watch (delta=true): the changes since the
// answer at p.Index, or the whole answer with Reset (apiv1.DiscoveryDelta; Apply rebuilds the
// answer). p.Index 0 asks for the whole answer.
func (c *Client) CapabilitiesDelta(ctx context.Context, q url.Values, p Poll) (*apiv1.DiscoveryDelta, error) {
	var out apiv1.DiscoveryDelta
	return &out, c.Do(ctx, p.request(apiv1.PathCapabilities, deltaValues(cloneValues(q), p), c.cfg.Timeout), &out)
}

// deltaValues sets q's delta watch parameters for p: p.request sets those of a long poll,
// these those of one that answers at once.
func deltaValues(q url.Values, p Poll) url.Values {
	q.Set("delta", "true")
	if p.Wait <= 0 {
		q.Set("index", strconv.FormatInt(p.Index, 10))
		if p.Epoch != "" {
			q.Set("epoch", p.Epoch)
		}
		q.Set("wait", "1ns") // a delta is a poll: one that answers at once
	}
	return q
}

// Routes returns the gateways' inputs: every manifest and public path.
func (c *Client) Routes(ctx context.Context, p Poll) (*apiv1.RoutesResponse, error) {
	var out apiv1.RoutesResponse
	return &out, c.Do(ctx, p.request(apiv1.PathDiscoveryRoutes, url.Values{}, c.cfg.Timeout), &out)
}

// RoutesDelta asks for the changes of the routes view since p.Index (a delta watch; with
// p.Wait, a long poll): the route inputs of the instances that changed, or the whole view
// with Reset. A registry without routes delta watches refuses it (400 UNKNOWN_PARAMETER).
func (c *Client) RoutesDelta(ctx context.Context, p Poll) (*apiv1.RoutesDelta, error) {
	var out apiv1.RoutesDelta
	return &out, c.Do(ctx, p.request(apiv1.PathDiscoveryRoutes, deltaValues(url.Values{}, p), c.cfg.Timeout), &out)
}

// DiscoveryHealth returns the registry's own state (epoch, revision, counts, store).
func (c *Client) DiscoveryHealth(ctx context.Context) (*apiv1.HealthResponse, error) {
	var out apiv1.HealthResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathDiscoveryHealth, nil, nil, &out)
}

// Ack acknowledges, for a gateway, the routes revision it serves.
func (c *Client) Ack(ctx context.Context, req *apiv1.AckRequest) (*apiv1.AckResponse, error) {
	var out apiv1.AckResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.PathAck, nil, req, &out)
}

// Outcomes reports a gateway's per-instance outcomes.
func (c *Client) Outcomes(ctx context.Context, req *apiv1.OutcomesRequest) error {
	return c.call(ctx, http.MethodPost, apiv1.PathOutcomes, nil, req, nil)
}

// Eligibility explains why an instance is (not) in rotation.
func (c *Client) Eligibility(ctx context.Context, instanceID string) (*apiv1.Explanation, error) {
	var out apiv1.Explanation
	return &out, c.call(ctx, http.MethodGet, apiv1.EligibilityPath(instanceID), nil, nil, &out)
}

// Incidents lists the incidents with status ("" for every one; "unresolved", "open",
// "acknowledged", "resolved").
func (c *Client) Incidents(ctx context.Context, status string) (*apiv1.IncidentsResponse, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	var out apiv1.IncidentsResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathIncidents, q, nil, &out)
}

// IncidentAction acknowledges, resolves or ignores an incident (action "acknowledge",
// "resolve" or "ignore"), with an optional comment saying why.
func (c *Client) IncidentAction(ctx context.Context, id, action, comment string) (*apiv1.Incident, error) {
	var body any
	if comment != "" {
		body = apiv1.IncidentActionRequest{Comment: comment}
	}
	var out apiv1.Incident
	return &out, c.call(ctx, http.MethodPost, apiv1.IncidentActionPath(id, action), nil, body, &out)
}

// AcknowledgeIncidents acknowledges many incidents at once; one the caller may not act on
// refuses them all.
func (c *Client) AcknowledgeIncidents(ctx context.Context, ids []string, comment string) (*apiv1.IncidentsResponse, error) {
	var out apiv1.IncidentsResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.PathIncidentsAcknowledge, nil, apiv1.BulkAcknowledgeRequest{IDs: ids, Comment: comment}, &out)
}

// Report sends what a gateway or an orchestrator saw: events for the journal, conditions
// that raise and clear incidents (the caller needs the permission outcomes need).
func (c *Client) Report(ctx context.Context, req *apiv1.ReportRequest) (*apiv1.ReportResponse, error) {
	var out apiv1.ReportResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.PathReports, nil, req, &out)
}

// Events reads the registry's event journal with q's filters (see EventsQuery).
func (c *Client) Events(ctx context.Context, q apiv1.EventsQuery) (*apiv1.EventsResponse, error) {
	var out apiv1.EventsResponse
	r := Request{Method: http.MethodGet, Path: apiv1.PathEvents, Query: q.Values()}
	if q.Wait > 0 {
		r.Timeout = q.Wait + DefaultTimeout
	}
	_, _, err := c.exchange(ctx, r, &out)
	return &out, err
}

// EventsCSV reads the journal with q's filters as CSV (a header row, then one row per event).
func (c *Client) EventsCSV(ctx context.Context, q apiv1.EventsQuery) ([]byte, error) {
	v := q.Values()
	v.Set("format", "csv")
	return c.Raw(ctx, Request{Method: http.MethodGet, Path: apiv1.PathEvents, Query: v})
}

// MetricsHistory returns the last hour of the registry's key series.
func (c *Client) MetricsHistory(ctx context.Context) (*apiv1.MetricsHistory, error) {
	var out apiv1.MetricsHistory
	return &out, c.call(ctx, http.MethodGet, apiv1.PathMetricsHistory, nil, nil, &out)
}

// Timeline returns the last 24 hours of every capability's health.
func (c *Client) Timeline(ctx context.Context) (*apiv1.TimelineResponse, error) {
	var out apiv1.TimelineResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathTimeline, nil, nil, &out)
}

// TimelineCSV returns the same as CSV: a header, then a row per capability and slice.
func (c *Client) TimelineCSV(ctx context.Context) ([]byte, error) {
	return c.Raw(ctx, Request{Method: http.MethodGet, Path: apiv1.PathTimeline, Query: url.Values{"format": {"csv"}}})
}

// Snapshot asks the registry to write a snapshot now.
func (c *Client) Snapshot(ctx context.Context) (*apiv1.SnapshotResponse, error) {
	var out apiv1.SnapshotResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.PathSnapshot, nil, nil, &out)
}

// Invalidate makes a gateway or an orchestrator drop its discovery cache and refetch.
func (c *Client) Invalidate(ctx context.Context) error {
	return c.call(ctx, http.MethodDelete, apiv1.PathInvalidate, nil, nil, nil)
}

// GatewayRoutes decodes a gateway's routing table (routing.RoutesAnswer, or its summary)
// into out.
func (c *Client) GatewayRoutes(ctx context.Context, out any) error {
	return c.call(ctx, http.MethodGet, apiv1.PathGatewayRoutes, nil, nil, out)
}

// TriggerHealth returns an orchestrator's per-workflow success rate and p95 over 24 hours.
func (c *Client) TriggerHealth(ctx context.Context) (*apiv1.TriggerHealthResponse, error) {
	var out apiv1.TriggerHealthResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathTriggerHealth, nil, nil, &out)
}

// TriggerHealthCSV returns the same as CSV: a header, then a row per workflow and slice.
func (c *Client) TriggerHealthCSV(ctx context.Context) ([]byte, error) {
	return c.Raw(ctx, Request{Method: http.MethodGet, Path: apiv1.PathTriggerHealth, Query: url.Values{"format": {"csv"}}})
}

// GatewayRouteHealth returns a gateway's per-route availability over 24 hours
// (gateway_admin).
func (c *Client) GatewayRouteHealth(ctx context.Context) (*apiv1.RouteHealthResponse, error) {
	var out apiv1.RouteHealthResponse
	return &out, c.call(ctx, http.MethodGet, apiv1.PathGatewayRouteHealth, nil, nil, &out)
}

// GatewayRegions returns a regional gateway's view of its regions (a gateway without
// --region answers 404).
func (c *Client) GatewayRegions(ctx context.Context) (*apiv1.GatewayRegions, error) {
	var out apiv1.GatewayRegions
	return &out, c.call(ctx, http.MethodGet, apiv1.PathGatewayRegions, nil, nil, &out)
}

// GatewayRouteHealthCSV returns the same as CSV: a header, then a row per route and slice.
func (c *Client) GatewayRouteHealthCSV(ctx context.Context) ([]byte, error) {
	return c.Raw(ctx, Request{Method: http.MethodGet, Path: apiv1.PathGatewayRouteHealth, Query: url.Values{"format": {"csv"}}})
}

// Workflows lists an orchestrator's workflows.
func (c *Client) Workflows(ctx context.Context) (*apiv1.WorkflowList, error) {
	var out apiv1.WorkflowList
	return &out, c.call(ctx, http.MethodGet, apiv1.PathWorkflows, nil, nil, &out)
}

// Workflow returns one workflow with its source and last validation.
func (c *Client) Workflow(ctx context.Context, name string) (*apiv1.WorkflowDetail, error) {
	var out apiv1.WorkflowDetail
	return &out, c.call(ctx, http.MethodGet, apiv1.WorkflowPath(name), nil, nil, &out)
}

// WorkflowValidation returns a workflow's last validation result.
func (c *Client) WorkflowValidation(ctx context.Context, name string) (*apiv1.ValidationResult, error) {
	var out apiv1.ValidationResult
	return &out, c.call(ctx, http.MethodGet, apiv1.WorkflowPath(name, "validation"), nil, nil, &out)
}

// Revalidate validates a workflow again, in every layer.
func (c *Client) Revalidate(ctx context.Context, name string) (*apiv1.ValidationResult, error) {
	var out apiv1.ValidationResult
	return &out, c.call(ctx, http.MethodPost, apiv1.WorkflowPath(name, "validate"), nil, nil, &out)
}

// Publish publishes a workflow (only published workflows run).
func (c *Client) Publish(ctx context.Context, name string) (*apiv1.ValidationResult, error) {
	var out apiv1.ValidationResult
	return &out, c.call(ctx, http.MethodPost, apiv1.WorkflowPath(name, "publish"), nil, nil, &out)
}

// UploadWorkflow uploads a workflow's YAML; the answer is its validation. A workflow that
// validation blocks is a 422 *apiv1.Error, with its validation result answered beside it.
func (c *Client) UploadWorkflow(ctx context.Context, yaml []byte) (*apiv1.ValidationResult, error) {
	var out apiv1.ValidationResult
	status, body, err := c.exchange(ctx, Request{Method: http.MethodPost, Path: apiv1.PathWorkflows, Body: yaml, ContentType: "application/yaml", Timeout: c.cfg.Timeout}, &out)
	if status == http.StatusUnprocessableEntity {
		var blocked struct {
			Validation *apiv1.ValidationResult `json:"validation"`
		}
		if json.Unmarshal(body, &blocked) == nil && blocked.Validation != nil {
			return blocked.Validation, err
		}
	}
	return &out, err
}

// RunWorkflow runs a published workflow with input (JSON; nil for none).
func (c *Client) RunWorkflow(ctx context.Context, name string, input json.RawMessage) (*apiv1.Run, error) {
	var out apiv1.Run
	err := c.Do(ctx, Request{Method: http.MethodPost, Path: apiv1.WorkflowPath(name, "run"), Body: input, Timeout: c.cfg.Timeout}, &out)
	return &out, err
}

// DeleteWorkflow removes a workflow, its revisions and its run history.
func (c *Client) DeleteWorkflow(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, apiv1.WorkflowPath(name), nil, nil, nil)
}

// Run returns one run of a workflow's history.
func (c *Client) Run(ctx context.Context, name, runID string) (*apiv1.Run, error) {
	var out apiv1.Run
	return &out, c.call(ctx, http.MethodGet, apiv1.WorkflowPath(name, "runs", runID), nil, nil, &out)
}

// CancelRun cancels a run in progress (409 when it has ended).
func (c *Client) CancelRun(ctx context.Context, name, runID string) error {
	return c.call(ctx, http.MethodPost, apiv1.WorkflowPath(name, "runs", runID, "cancel"), nil, nil, nil)
}

// Runs returns a workflow's recent runs.
func (c *Client) Runs(ctx context.Context, name string) (*apiv1.RunHistory, error) {
	var out apiv1.RunHistory
	return &out, c.call(ctx, http.MethodGet, apiv1.WorkflowPath(name, "runs"), nil, nil, &out)
}

// Validate asks a provider (the client's base URL is its endpoint) to validate a step.
func (c *Client) Validate(ctx context.Context, capabilityID string, req *apiv1.ValidateRequest) (*apiv1.ValidateResponse, error) {
	return c.ValidateAt(ctx, apiv1.ValidatePath(capabilityID), req)
}

// ValidateAt is Validate at path, a provider's metadata.validate_endpoint, under the
// client's base URL (the provider's endpoint).
func (c *Client) ValidateAt(ctx context.Context, path string, req *apiv1.ValidateRequest) (*apiv1.ValidateResponse, error) {
	var out apiv1.ValidateResponse
	return &out, c.call(ctx, http.MethodPost, path, nil, req, &out)
}

// Invoke asks a provider (the client's base URL is its endpoint) to run a step.
func (c *Client) Invoke(ctx context.Context, capabilityID string, req *apiv1.InvokeRequest) (*apiv1.InvokeResponse, error) {
	var out apiv1.InvokeResponse
	return &out, c.call(ctx, http.MethodPost, apiv1.InvokePath(capabilityID), nil, req, &out)
}

func cloneValues(q url.Values) url.Values {
	out := make(url.Values, len(q)+3)
	for k, v := range q {
		out[k] = v
	}
	return out
}

// Evacuate evacuates a zone (admin): POST /v1/admin/evacuations.
func (c *Client) Evacuate(ctx context.Context, req *apiv1.EvacuationRequest) (*apiv1.Evacuation, error) {
	var out apiv1.Evacuation
	return &out, c.call(ctx, http.MethodPost, apiv1.PathEvacuations, nil, req, &out)
}

// Evacuations lists the evacuations (admin).
func (c *Client) Evacuations(ctx context.Context) (*apiv1.EvacuationList, error) {
	var out apiv1.EvacuationList
	return &out, c.call(ctx, http.MethodGet, apiv1.PathEvacuations, nil, nil, &out)
}

// ExtendEvacuation makes an active evacuation hold for duration from now (admin).
func (c *Client) ExtendEvacuation(ctx context.Context, id, duration string) (*apiv1.Evacuation, error) {
	var out apiv1.Evacuation
	return &out, c.call(ctx, http.MethodPatch, apiv1.PathEvacuations+"/"+url.PathEscape(id), nil, apiv1.ExtendRequest{Duration: duration}, &out)
}

// EndEvacuation ends an active evacuation now: its zone starts the capped way back (admin).
func (c *Client) EndEvacuation(ctx context.Context, id string) (*apiv1.Evacuation, error) {
	var out apiv1.Evacuation
	return &out, c.call(ctx, http.MethodDelete, apiv1.PathEvacuations+"/"+url.PathEscape(id), nil, nil, &out)
}

// Override withdraws or releases one instance (admin): POST /v1/admin/overrides.
func (c *Client) Override(ctx context.Context, req *apiv1.OverrideRequest) (*apiv1.Override, error) {
	var out apiv1.Override
	return &out, c.call(ctx, http.MethodPost, apiv1.PathOverrides, nil, req, &out)
}

// Overrides lists the overrides (admin).
func (c *Client) Overrides(ctx context.Context) (*apiv1.OverrideList, error) {
	var out apiv1.OverrideList
	return &out, c.call(ctx, http.MethodGet, apiv1.PathOverrides, nil, nil, &out)
}
