package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// zonalRegistration registers an instance of messaging.publish in zone, without a probe
// class (in rotation at once).
func zonalRegistration(id, zone string) string {
	return fmt.Sprintf(`{"instance_id":%q,"service_name":"svc","service_version":"1.0.0","endpoint":"http://127.0.0.1:9","zone":%q,
"capabilities":[{"capability_id":"messaging.publish","capability_version":"1.0.0","contract_schema_version":"1.0","provider":"jms"}]}`, id, zone)
}

// verdicts answers the eligibility of every instance of messaging.publish (include=all).
func verdicts(t *testing.T, url string) map[string]string {
	t.Helper()
	var d apiv1.DiscoveryResponse
	r := do(t, "GET", url+"/v1/discovery/capabilities?capability_id=messaging.publish&include=all", "")
	json.Unmarshal(r.body, &d)
	out := map[string]string{}
	for _, e := range d.Capabilities {
		out[e.InstanceID] = fmt.Sprintf("%s/%d", e.Eligibility, e.Weight)
	}
	return out
}

// TestOperatorActions: the evacuation and override API, its refusals (which change nothing)
// and its effect on discovery, on the registry's clock.
func TestOperatorActions(t *testing.T) {
	s := newDeltaServer(t)
	gens := map[string]int64{}
	for i, zone := range []string{"z1", "z1", "z2", "z2", "z3", "z3"} {
		id := fmt.Sprintf("i%d", i)
		gens[id] = register(t, s, zonalRegistration(id, zone)).Generation
	}
	advance := func(d time.Duration) { // the leases hold
		s.Clock.Advance(d)
		for id, g := range gens {
			do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", fmt.Sprintf(`{"generation":%d}`, g))
		}
		s.Registry.Sweep(context.Background())
	}
	advance(31 * time.Second) // past the slow start
	ev := func(body string) response { return do(t, "POST", s.URL+apiv1.PathEvacuations, body) }
	for _, tt := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"unknown zone", `{"zone":"z9","duration":"1h","reason":"r"}`, 404, apiv1.CodeUnknownZone},
		{"no duration", `{"zone":"z1","reason":"r"}`, 400, apiv1.CodeInvalidRequest},
		{"a duration of 0", `{"zone":"z1","duration":"0s","reason":"r"}`, 400, apiv1.CodeInvalidRequest},
		{"over 72 h", `{"zone":"z1","duration":"73h","reason":"r"}`, 400, apiv1.CodeInvalidRequest},
		{"no reason", `{"zone":"z1","duration":"1h"}`, 400, apiv1.CodeInvalidRequest},
	} {
		if r := ev(tt.body); r.status != tt.status || apiErr(t, r).Code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
		}
	}
	if got := verdicts(t, s.URL); got["i0"] != "serving/100" {
		t.Fatalf("a refused evacuation changed something: %v", got)
	}
	advance(30 * time.Second) // the refusals used 5 of the 10 actions a minute: back to 10

	r := ev(`{"zone":"z1","duration":"2h","reason":"zone z1 drops 4% of publishes"}`)
	var e1 apiv1.Evacuation
	json.Unmarshal(r.body, &e1)
	if r.status != http.StatusCreated || e1.State != apiv1.EvacuationActive || e1.AffectedInstances != 2 || e1.CreatedBy == "" {
		t.Fatalf("evacuate z1 = %d %s", r.status, r.body)
	}
	if got := verdicts(t, s.URL); got["i0"] != "evacuated/0" || got["i1"] != "evacuated/0" || got["i2"] != "serving/100" {
		t.Errorf("after the evacuation: %v", got)
	}
	if r := ev(`{"zone":"z1","duration":"2h","reason":"again"}`); r.status != 409 || apiErr(t, r).Code != apiv1.CodeEvacuationExists {
		t.Errorf("a second evacuation of z1 = %d %s", r.status, r.body)
	}
	// z2 leaves 2 of 4 in rotation: exactly half is enough; then z3 would leave none
	if r := ev(`{"zone":"z2","duration":"1h","reason":"r"}`); r.status != 201 {
		t.Fatalf("evacuate z2 = %d %s", r.status, r.body)
	}
	if r := ev(`{"zone":"z3","duration":"1h","reason":"r"}`); r.status != 409 || apiErr(t, r).Code != apiv1.CodeEvacuationUnsafe || len(apiErr(t, r).Details) != 1 {
		t.Errorf("evacuating the last zone = %d %s", r.status, r.body)
	}
	if got := verdicts(t, s.URL); got["i4"] != "serving/100" {
		t.Errorf("a refused evacuation of z3 changed it: %v", got)
	}
	if r := do(t, "PATCH", s.URL+apiv1.PathEvacuations+"/"+e1.ID, `{"duration":"4h"}`); r.status != 200 {
		t.Errorf("extend = %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", s.URL+apiv1.PathEvacuations+"/"+e1.ID, ""); r.status != 200 {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}
	if got := verdicts(t, s.URL); got["i0"] != "returning/10" {
		t.Errorf("after the cancel: %v", got)
	}
	var one apiv1.Evacuation
	json.Unmarshal(do(t, "GET", s.URL+apiv1.PathEvacuations+"/"+e1.ID, "").body, &one)
	if one.State != apiv1.EvacuationReturning || one.Return == nil || one.Return.Weight != 10 || one.Outcome != apiv1.OutcomeCancelled {
		t.Errorf("the cancelled evacuation = %+v", one)
	}
	if r := do(t, "DELETE", s.URL+apiv1.PathEvacuations+"/"+e1.ID, ""); r.status != 409 {
		t.Errorf("cancel of an ended evacuation = %d", r.status)
	}
	advance(61 * time.Second)
	if got := verdicts(t, s.URL); got["i0"] != "returning/25" {
		t.Errorf("a step later: %v", got)
	}

	// overrides
	if r := do(t, "POST", s.URL+apiv1.PathOverrides, `{"instance_id":"nope","action":"withdraw","duration":"30m","reason":"r"}`); r.status != 404 {
		t.Errorf("override of an unknown instance = %d", r.status)
	}
	r = do(t, "POST", s.URL+apiv1.PathOverrides, `{"instance_id":"i4","action":"withdraw","duration":"30m","reason":"bad disk"}`)
	var ov apiv1.Override
	json.Unmarshal(r.body, &ov)
	if r.status != 201 || !ov.Active || ov.ExpiresAt == nil {
		t.Fatalf("withdraw = %d %s", r.status, r.body)
	}
	gens["i4"] = register(t, s, zonalRegistration("i4", "z3")).Generation // a re-registration does not undo it
	if got := verdicts(t, s.URL); got["i4"] != "withdrawn/0" {
		t.Errorf("after the withdrawal and a re-registration: %v", got)
	}
	if r := do(t, "DELETE", s.URL+apiv1.PathOverrides+"/"+ov.ID, ""); r.status != 200 {
		t.Errorf("end the override = %d %s", r.status, r.body)
	}
	if got := verdicts(t, s.URL); got["i4"] != "slow_start/10" {
		t.Errorf("after the override ended: %v", got)
	}

	// the rate limit: 10 actions at once per identity, refused ones counted too
	var last response
	for range 12 {
		last = ev(`{"zone":"z9","duration":"1h","reason":"r"}`)
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Errorf("the 12th action = %d (Retry-After %q)", last.status, last.header.Get("Retry-After"))
	}
}

// TestOperatorActionsSurviveARestart: the evacuations and withdrawals in a snapshot hold
// again in the registry restored from it.
func TestOperatorActionsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	newServer := func() *registrytest.Server {
		m, err := health.NewMonitor(health.MonitorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return registrytest.NewServer(t, registry.Config{SnapshotDir: dir, Eligibility: m})
	}
	s := newServer()
	for i, zone := range []string{"z1", "z2", "z2"} {
		register(t, s, zonalRegistration(fmt.Sprintf("i%d", i), zone))
	}
	if r := do(t, "POST", s.URL+apiv1.PathEvacuations, `{"zone":"z1","duration":"2h","reason":"r"}`); r.status != 201 {
		t.Fatalf("evacuate = %d %s", r.status, r.body)
	}
	if r := do(t, "POST", s.URL+apiv1.PathOverrides, `{"instance_id":"i2","action":"withdraw","duration":"1h","reason":"r"}`); r.status != 201 {
		t.Fatalf("withdraw = %d %s", r.status, r.body)
	}
	s.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up: a snapshot may be written
	if _, err := s.Registry.WriteSnapshot(context.Background()); err != nil {
		t.Fatal(err)
	}

	s2 := newServer()
	if _, _, err := s2.Registry.RestoreLatest(context.Background()); err != nil {
		t.Fatal(err)
	}
	var list apiv1.EvacuationList
	json.Unmarshal(do(t, "GET", s2.URL+apiv1.PathEvacuations, "").body, &list)
	if len(list.Evacuations) != 1 || list.Evacuations[0].State != apiv1.EvacuationActive {
		t.Fatalf("evacuations after the restore: %+v", list)
	}
	for i, zone := range []string{"z1", "z2", "z2"} {
		register(t, s2, zonalRegistration(fmt.Sprintf("i%d", i), zone))
	}
	if got := verdicts(t, s2.URL); got["i0"] != "evacuated/0" || got["i2"] != "withdrawn/0" || got["i1"] != "slow_start/10" {
		t.Errorf("verdicts after the restore: %v", got)
	}
}

// TestPracticeRecordsWhatAlarmed: a practice evacuation ends by itself or when a real one
// supersedes it (interrupted); its record says what alarmed while it held — a remaining
// zone's group in panic, even one that left panic before the end.
func TestPracticeRecordsWhatAlarmed(t *testing.T) {
	var j *journal.Journal
	var s *registrytest.Server
	j = journal.New(0, func() time.Time { return s.Clock.Now() })
	m, err := health.NewMonitor(health.MonitorConfig{OnTransition: journal.FromTransitions(j)})
	if err != nil {
		t.Fatal(err)
	}
	s = registrytest.NewServer(t, registry.Config{Eligibility: m, Journal: j})
	gens := map[string]int64{}
	for i, zone := range []string{"z1", "z1", "z2", "z2", "z2"} {
		id := fmt.Sprintf("i%d", i)
		gens[id] = register(t, s, zonalRegistration(id, zone)).Generation
	}
	heartbeat := func(id, health string) {
		do(t, "PUT", s.URL+"/v1/services/"+id+"/heartbeat", fmt.Sprintf(`{"generation":%d,"health":%q}`, gens[id], health))
	}
	r := do(t, "POST", s.URL+apiv1.PathEvacuations, `{"zone":"z1","duration":"1h","reason":"drill","practice":true}`)
	var practice apiv1.Evacuation
	json.Unmarshal(r.body, &practice)
	if r.status != 201 || !practice.Practice {
		t.Fatalf("practice = %d %s", r.status, r.body)
	}
	// two of z2's three fail a while: z2 is in panic, then recovers
	s.Clock.Advance(time.Second)
	heartbeat("i2", "failing")
	heartbeat("i3", "failing")
	s.Clock.Advance(time.Second)
	heartbeat("i2", "ok")
	heartbeat("i3", "ok")
	// a real evacuation of z1 supersedes the practice
	if r := do(t, "POST", s.URL+apiv1.PathEvacuations, `{"zone":"z1","duration":"1h","reason":"real","force":true}`); r.status != 201 {
		t.Fatalf("the real evacuation = %d %s", r.status, r.body)
	}
	var got apiv1.Evacuation
	json.Unmarshal(do(t, "GET", s.URL+apiv1.PathEvacuations+"/"+practice.ID, "").body, &got)
	if got.Outcome != apiv1.OutcomeInterrupted || got.Alarmed == nil || !*got.Alarmed || len(got.Alarms) == 0 {
		t.Errorf("the practice after the real one = %+v", got)
	}
}

// TestPracticeRecordsAZoneOutlier: a remaining zone that fails as a whole while a practice
// evacuation holds is among its alarms (outcomes pooled from two gateways).
func TestPracticeRecordsAZoneOutlier(t *testing.T) {
	s := newDeltaServer(t)
	gens := map[string]int64{}
	for i, zone := range []string{"z1", "z2", "z2", "z3", "z3"} {
		id := fmt.Sprintf("i%d", i)
		gens[id] = register(t, s, zonalRegistration(id, zone)).Generation
	}
	r := do(t, "POST", s.URL+apiv1.PathEvacuations, `{"zone":"z1","duration":"1h","reason":"drill","practice":true}`)
	var practice apiv1.Evacuation
	json.Unmarshal(r.body, &practice)
	if r.status != 201 {
		t.Fatalf("practice = %d %s", r.status, r.body)
	}
	for _, gw := range []string{"gw-1", "gw-2"} {
		var outs []string
		for id, g := range gens {
			ok, errs := 499, 1
			if id == "i1" || id == "i2" { // zone z2 fails 5 %
				ok, errs = 475, 25
			}
			if id != "i0" {
				outs = append(outs, fmt.Sprintf(`{"instance_id":%q,"generation":%d,"ok":%d,"errors":%d,"connect_failures":0}`, id, g, ok, errs))
			}
		}
		if r := do(t, "POST", s.URL+"/v1/outcomes", fmt.Sprintf(`{"gateway_id":%q,"outcomes":[%s]}`, gw, strings.Join(outs, ","))); r.status != 200 {
			t.Fatalf("outcomes = %d %s", r.status, r.body)
		}
	}
	var got apiv1.Evacuation
	json.Unmarshal(do(t, "DELETE", s.URL+apiv1.PathEvacuations+"/"+practice.ID, "").body, &got)
	if got.Alarmed == nil || !*got.Alarmed || !strings.Contains(strings.Join(got.Alarms, "; "), "zone z2 is a zone outlier") {
		t.Errorf("the practice's alarms: %+v", got.Alarms)
	}
}

// TestOverrideThatEmptiesAPoolIsRefusedUnlessForced: withdrawing the last instance in
// rotation of a pool (a zone's group, a provider's step candidates, a route of its
// service) is OVERRIDE_UNSAFE naming each pool, and changes nothing; forced, it is out and
// stays out even in panic: no pool answers it, and include=all says it is excluded. Both
// are journaled.
func TestOverrideThatEmptiesAPoolIsRefusedUnlessForced(t *testing.T) {
	var j *journal.Journal
	var s *registrytest.Server
	j = journal.New(0, func() time.Time { return s.Clock.Now() })
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s = registrytest.NewServer(t, registry.Config{Eligibility: m, Journal: j})
	register(t, s, zonalRegistration("i0", "z1"))
	register(t, s, zonalRegistration("i1", "z1"))
	register(t, s, zonalRegistration("i2", "z2")) // alone in z2
	s.Clock.Advance(31 * time.Second)
	s.Registry.Sweep(context.Background())
	withdraw := func(id string, force bool) response {
		return do(t, "POST", s.URL+apiv1.PathOverrides, fmt.Sprintf(`{"instance_id":%q,"action":"withdraw","duration":"30m","reason":"r","force":%t}`, id, force))
	}
	if r := withdraw("i0", false); r.status != http.StatusCreated {
		t.Fatalf("withdrawing one of two in z1 = %d %s", r.status, r.body)
	}
	// i1 is now the last of z1's group (i2 still serves the provider's steps elsewhere)
	r := withdraw("i1", false)
	if e := apiErr(t, r); r.status != http.StatusConflict || e.Code != apiv1.CodeOverrideUnsafe || len(e.Details) != 1 || e.Details[0].Path != "group/messaging.publish/z1" {
		t.Fatalf("withdrawing the last of z1 = %d %s, want 409 %s naming group/messaging.publish/z1", r.status, r.body, apiv1.CodeOverrideUnsafe)
	}
	if got := verdicts(t, s.URL); got["i1"] != "serving/100" {
		t.Errorf("a refused withdrawal changed i1: %v", got)
	}
	// i2 is the last in z2 and the last of the jms provider's step candidates
	r = withdraw("i2", false)
	if e := apiErr(t, r); r.status != http.StatusConflict || len(e.Details) != 1 || e.Details[0].Path != "group/messaging.publish/z2" {
		t.Errorf("withdrawing the last of z2 = %d %s", r.status, r.body)
	}
	r = withdraw("i1", true)
	var ov apiv1.Override
	json.Unmarshal(r.body, &ov)
	if r.status != http.StatusCreated || !ov.Force || len(ov.Emptied) != 1 {
		t.Fatalf("a forced withdrawal = %d %s, want 201 naming the group it empties", r.status, r.body)
	}
	// z1: i0 withdrawn (a member, out of rotation) and i1 forced out (no member): the group
	// panics and answers i0 again, never i1
	var d apiv1.DiscoveryResponse
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish&zone=z1", "").body, &d)
	if len(d.Capabilities) != 1 || d.Capabilities[0].InstanceID != "i0" || !d.Capabilities[0].Panic {
		t.Errorf("z1 after the forced withdrawal: %+v, want i0 alone, in panic", d.Capabilities)
	}
	json.Unmarshal(do(t, "GET", s.URL+"/v1/discovery/capabilities?capability_id=messaging.publish&zone=z1&include=all", "").body, &d)
	for _, e := range d.Capabilities {
		if (e.InstanceID == "i1") != e.Excluded {
			t.Errorf("include=all: %s excluded=%v, want only i1 excluded", e.InstanceID, e.Excluded)
		}
		if e.InstanceID == "i1" && (e.Panic || e.Eligibility != apiv1.EligibilityWithdrawn) {
			t.Errorf("include=all: i1 = %+v, want withdrawn outside the panic", e)
		}
	}
	var ex apiv1.Explanation
	json.Unmarshal(do(t, "GET", s.URL+"/v1/services/i1/eligibility", "").body, &ex)
	if codes := reasonCodes(ex); !strings.HasPrefix(strings.Join(codes, ","), health.ReasonOperatorForced+","+health.ReasonOperatorWithdrawn) {
		t.Errorf("i1's reasons = %v", codes)
	}
	var refused, forced int
	events, _ := j.Find(journal.Query{Types: []string{apiv1.EventOverride}})
	for _, e := range events {
		if strings.Contains(e.Message, "OVERRIDE_UNSAFE") || strings.Contains(e.Message, "override_unsafe") {
			refused++
		}
		if strings.Contains(e.Message, "forced") {
			forced++
		}
	}
	if refused != 2 || forced != 1 {
		t.Errorf("journal: %d refusals and %d forced withdrawals, want 2 and 1", refused, forced)
	}
}

func reasonCodes(ex apiv1.Explanation) []string {
	var out []string
	for _, r := range ex.Reasons {
		out = append(out, r.Code)
	}
	return out
}

// TestOperatorInputIsReadStrictly: an operator action never does more than was written. A
// misspelt field is 400 UNKNOWN_FIELD naming the nearest one (a misspelt capability_id must
// not evacuate every capability of the zone, a misspelt practise must not make a real
// evacuation, a misspelt force is not dropped); an empty body lists every missing field; a
// missing instance_id is 400, not 404; a reason over 1 KiB is refused; a release with
// nothing to release is 409. None of them changes anything.
func TestOperatorInputIsReadStrictly(t *testing.T) {
	m, err := health.NewMonitor(health.MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := registrytest.NewServer(t, registry.Config{Eligibility: m})
	for i, zone := range []string{"z1", "z1", "z2", "z2"} {
		register(t, s, zonalRegistration(fmt.Sprintf("i%d", i), zone))
	}
	s.Clock.Advance(31 * time.Second)
	s.Registry.Sweep(context.Background())
	long := strings.Repeat("x", registry.MaxReasonBytes+1)
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		code                     string
		paths                    []string // the details' paths
		near                     string   // a detail suggests it
	}{
		{"a misspelt capability_id", "POST", apiv1.PathEvacuations, `{"zone":"z2","capabilty_id":"messaging.other","duration":"1h","reason":"r"}`, 400, apiv1.CodeUnknownField, []string{"capabilty_id"}, "capability_id"},
		{"a misspelt practice", "POST", apiv1.PathEvacuations, `{"zone":"z2","duration":"1h","reason":"r","practise":true}`, 400, apiv1.CodeUnknownField, []string{"practise"}, "practice"},
		{"a misspelt force", "POST", apiv1.PathOverrides, `{"instance_id":"i0","action":"withdraw","duration":"1h","reason":"r","froce":true}`, 400, apiv1.CodeUnknownField, []string{"froce"}, "force"},
		{"an empty evacuation", "POST", apiv1.PathEvacuations, ``, 400, apiv1.CodeInvalidRequest, []string{"zone", "duration", "reason"}, ""},
		{"an empty override", "POST", apiv1.PathOverrides, `{}`, 400, apiv1.CodeInvalidRequest, []string{"instance_id", "action", "reason"}, ""},
		{"no instance_id", "POST", apiv1.PathOverrides, `{"action":"withdraw","duration":"1h","reason":"r"}`, 400, apiv1.CodeInvalidRequest, []string{"instance_id"}, ""},
		{"a reason over 1 KiB", "POST", apiv1.PathOverrides, `{"instance_id":"i0","action":"withdraw","duration":"1h","reason":"` + long + `"}`, 400, apiv1.CodeInvalidRequest, []string{"reason"}, ""},
		{"nothing to release", "POST", apiv1.PathOverrides, `{"instance_id":"i0","action":"release","reason":"r"}`, 409, apiv1.CodeNothingToRelease, nil, ""},
		{"a misspelt duration on extend", "PATCH", apiv1.PathEvacuations + "/ev-x", `{"duraton":"1h"}`, 400, apiv1.CodeUnknownField, []string{"duraton"}, "duration"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, tt.method, s.URL+tt.path, tt.body)
			e := apiErr(t, r)
			var paths []string
			near := false
			for _, d := range e.Details {
				paths = append(paths, d.Path)
				near = near || (tt.near != "" && strings.Contains(d.Message, `"`+tt.near+`"`))
			}
			if r.status != tt.status || e.Code != tt.code || strings.Join(paths, ",") != strings.Join(tt.paths, ",") || (tt.near != "" && !near) {
				t.Errorf("%d %s %v (%s), want %d %s naming %v (and %q)", r.status, e.Code, paths, r.body, tt.status, tt.code, tt.paths, tt.near)
			}
		})
	}
	if got := verdicts(t, s.URL); got["i0"] != "serving/100" || got["i2"] != "serving/100" {
		t.Errorf("a refused action changed something: %v", got)
	}
	var evs apiv1.EvacuationList
	json.Unmarshal(do(t, "GET", s.URL+apiv1.PathEvacuations, "").body, &evs)
	if len(evs.Evacuations) != 0 {
		t.Errorf("refused evacuations were recorded: %+v", evs.Evacuations)
	}
	// a release of a real withdrawal is not refused
	if r := do(t, "POST", s.URL+apiv1.PathOverrides, `{"instance_id":"i0","action":"withdraw","duration":"1h","reason":"r"}`); r.status != 201 {
		t.Fatalf("withdraw = %d %s", r.status, r.body)
	}
	if r := do(t, "POST", s.URL+apiv1.PathOverrides, `{"instance_id":"i0","action":"release","reason":"r"}`); r.status != 201 {
		t.Errorf("release of a withdrawal = %d %s", r.status, r.body)
	}
}
