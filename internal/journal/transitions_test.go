package journal

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/health"
)

func TestFromTransitions(t *testing.T) {
	tests := []struct {
		name string
		in   health.Transition
		want string // type severity subject: message, or "" for nothing recorded
	}{
		{"quarantine is an error", health.Transition{InstanceID: "jms-1", From: apiv1.EligibilityWithdrawn, To: apiv1.EligibilityQuarantined, Reasons: []string{"FLAPPING"}},
			"eligibility.transition error jms-1: jms-1: withdrawn -> quarantined: FLAPPING"},
		{"withdrawn is a warning", health.Transition{InstanceID: "jms-1", From: apiv1.EligibilityServing, To: apiv1.EligibilityWithdrawn, Reasons: []string{"PROBE_FAILING", "PROBE_REFUSED"}},
			"eligibility.transition warning jms-1: jms-1: serving -> withdrawn: PROBE_FAILING; PROBE_REFUSED"},
		{"back in rotation is news", health.Transition{InstanceID: "jms-1", From: apiv1.EligibilitySlowStart, To: apiv1.EligibilityServing},
			"eligibility.transition info jms-1: jms-1: slow_start -> serving"},
		{"a first verdict comes with the registration's event", health.Transition{InstanceID: "jms-1", From: apiv1.EligibilityAbsent, To: apiv1.EligibilitySlowStart, Reasons: []string{"SLOW_START"}}, ""},
		{"panic", health.Transition{To: health.TransitionPanic, Reasons: []string{"messaging.publish", "a"}},
			`eligibility.panic warning messaging.publish: messaging.publish in zone "a" entered panic: too few instances in rotation, discovery answers all of them`},
		{"sustained panic", health.Transition{To: health.TransitionPanicSustained, Reasons: []string{"messaging.publish", "a"}},
			`eligibility.panic error messaging.publish: messaging.publish in zone "a" stayed in panic: an incident is raised`},
		{"panic over", health.Transition{To: health.TransitionPanicOver, Reasons: []string{"messaging.publish", "a"}},
			`eligibility.panic info messaging.publish: messaging.publish in zone "a" left panic`},
		{"a malformed panic is dropped", health.Transition{To: health.TransitionPanic}, ""},
		{"self-preservation", health.Transition{To: health.TransitionSelfPreservation, Reasons: []string{"LOW_RENEWALS: 3 of 10"}},
			"registry.self_preservation error registry: self-preservation entered: lease expiry stops evicting (LOW_RENEWALS: 3 of 10)"},
		{"self-preservation over", health.Transition{To: health.TransitionSelfPreservationOver, Reasons: []string{"RENEWALS_BACK"}},
			"registry.self_preservation info registry: self-preservation left: lease expiry evicts again (RENEWALS_BACK)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := New(0, fixed)
			FromTransitions(j)(tt.in)
			es, _ := j.Find(Query{})
			got := ""
			if len(es) == 1 {
				got = es[0].Type + " " + es[0].Severity + " " + es[0].Subject + ": " + es[0].Message
			}
			if diff := cmp.Diff(tt.want, got); diff != "" || len(es) > 1 {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
		})
	}
	FromTransitions(nil)(health.Transition{InstanceID: "x", To: apiv1.EligibilityServing}) // a nil journal records nothing, and does not panic
}

// TestTransitionEventAsBefore: an instance's transition, kept as it is and written when read,
// reads as the event written at once did: the same time, message and attributes (the bytes
// a map of from, to and reasons encodes to), whatever the reasons.
func TestTransitionEventAsBefore(t *testing.T) {
	at := t0.Add(time.Minute)
	for _, reasons := range [][]string{nil, {}, {"SLOW_START"}, {"PROBE_FAILING", "PROBE_REFUSED"}, {`a "quoted" <reason>`, "ünïcode"}} {
		tr := health.Transition{InstanceID: "jms-1", At: at, From: apiv1.EligibilityServing, To: apiv1.EligibilityWithdrawn, Reasons: reasons}
		j := New(0, fixed)
		FromTransitions(j)(tr)
		es, _ := j.Find(Query{})
		if len(es) != 1 {
			t.Fatalf("reasons %q: %d events, want 1", reasons, len(es))
		}
		msg := "jms-1: serving -> withdrawn"
		if len(reasons) > 0 {
			msg += ": " + strings.Join(reasons, "; ")
		}
		before := encodeAttrs(map[string]any{"from": tr.From, "to": tr.To, "reasons": reasons}) // as the event written at once had them
		want := apiv1.Event{Seq: 1, Time: at, Type: apiv1.EventEligibility, Severity: apiv1.SeverityWarning, Subject: "jms-1", Message: msg}
		if err := json.Unmarshal(before, &want.Attrs); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, es[0]); diff != "" {
			t.Errorf("reasons %q: the event (-as before +now):\n%s", reasons, diff)
		}
		if got := j.at(0).made().Attrs; string(got) != string(before) {
			t.Errorf("reasons %q: attributes %s, as before %s", reasons, got, before)
		}
	}
}
