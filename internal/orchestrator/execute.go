package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/Masterminds/semver/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/workflow"
)

// StaticCapability is a capability the orchestrator may use when the registry has never
// answered (--static-capabilities).
type StaticCapability struct {
	CapabilityID string          `json:"capability_id" yaml:"capability_id"`
	Provider     string          `json:"provider" yaml:"provider"`
	Version      string          `json:"version" yaml:"version"`
	Endpoint     string          `json:"endpoint" yaml:"endpoint"`
	Metadata     json.RawMessage `json:"metadata,omitempty" yaml:"-"`
}

// candidate is an instance a step may be sent to.
type candidate struct {
	instance, endpoint string
	rank               apiv1.Rank
}

// execute runs w's steps in order with input.
func (o *Orchestrator) execute(ctx context.Context, w *workflow.Workflow, runID, trigger string, input json.RawMessage) *apiv1.Run {
	start := o.cfg.Now()
	run := &apiv1.Run{RunID: runID, Workflow: w.Name, Trigger: trigger, Status: apiv1.RunSucceeded, StartedAt: start.UTC(), Steps: make([]apiv1.StepRun, len(w.Steps)), Output: json.RawMessage("null")}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	outputs := map[string]json.RawMessage{}
	var previous json.RawMessage = input
	failed := false
	for i := range w.Steps {
		st := &w.Steps[i]
		sr := &run.Steps[i]
		sr.StepID = st.ID
		if failed {
			sr.Status = apiv1.StepSkipped
			continue
		}
		t0 := o.cfg.Now()
		out, inst, err := o.step(ctx, w, st, runID, payloadFor(st, input, previous, outputs))
		sr.DurationMS = ms(o.cfg.Now().Sub(t0))
		sr.InstanceID = inst
		if err != nil {
			var ae *apiv1.Error
			if !errors.As(err, &ae) {
				ae = apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "%v", err)
			}
			sr.Status, sr.Error = apiv1.RunFailed, ae
			run.Status, failed = apiv1.RunFailed, true
			continue
		}
		sr.Status, sr.Output = apiv1.RunSucceeded, out
		outputs[st.ID], previous, run.Output = out, out, out
	}
	run.DurationMS = ms(o.cfg.Now().Sub(start))
	o.metrics.ran(run)
	return run
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// payloadFor picks a step's payload: payload_from when set, else request.payload.
func payloadFor(st *workflow.Step, input, previous json.RawMessage, outputs map[string]json.RawMessage) json.RawMessage {
	switch st.PayloadFrom {
	case "input":
		return input
	case "previous":
		return previous
	case "":
		var r struct {
			Payload json.RawMessage `json:"payload"`
		}
		json.Unmarshal(st.Request, &r)
		return r.Payload
	default:
		return outputs[st.PayloadFrom]
	}
}

// step resolves and invokes one step, failing over to the next candidate only when the
// connection failed before the request was sent.
func (o *Orchestrator) step(ctx context.Context, w *workflow.Workflow, st *workflow.Step, runID string, payload json.RawMessage) (json.RawMessage, string, error) {
	cands, err := o.candidates(ctx, st)
	if err != nil {
		return nil, "", err
	}
	req := &apiv1.InvokeRequest{WorkflowName: w.Name, RunID: runID, StepID: st.ID, StepVersion: st.StepVersion,
		Request: st.Request, Payload: payload}
	var lastErr error
	for _, c := range cands {
		out, err := o.invoke(ctx, st, c, req)
		if err == nil {
			return out, c.instance, nil
		}
		lastErr = err
		if !dialFailure(err) {
			return nil, c.instance, err
		}
	}
	return nil, "", fmt.Errorf("every candidate for %s was unreachable: %w", st.Capability.ID, lastErr)
}

func dialFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (o *Orchestrator) invoke(ctx context.Context, st *workflow.Step, c candidate, req *apiv1.InvokeRequest) (json.RawMessage, error) {
	pc, err := client.New(client.Config{Registries: []string{c.endpoint}, HTTPClient: o.cfg.Client, Timeout: st.Timeout})
	if err != nil {
		return nil, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "step %s: %s: %v", st.ID, c.instance, err)
	}
	ir, err := pc.Invoke(ctx, st.Capability.ID, req)
	switch {
	case err == nil:
		return ir.Output, nil
	case errors.Is(err, context.DeadlineExceeded):
		return nil, apiv1.Errorf(http.StatusGatewayTimeout, apiv1.CodeUnavailable, "step %s: no answer from %s within %s", st.ID, c.instance, st.Timeout)
	case errors.Is(err, client.ErrDecode):
		return nil, apiv1.Errorf(http.StatusBadGateway, apiv1.CodeUnavailable, "step %s: %s answered no invoke result: %v", st.ID, c.instance, err)
	default:
		return nil, err // an error answer, or a transport failure (a dial failure moves to the next candidate)
	}
}

// candidates resolves a step: through discovery (instances in rotation, or all of the step's
// pool when fewer than the panic threshold of it are in rotation, or all of a group the
// registry says is in panic), or the static capabilities when the registry has never answered; in order metadata.priority desc, capability_version desc,
// registration order.
func (o *Orchestrator) candidates(ctx context.Context, st *workflow.Step) ([]candidate, error) {
	cons, err := semver.NewConstraint(st.Capability.Constraint)
	if err != nil {
		return nil, apiv1.Errorf(http.StatusBadRequest, apiv1.CodeInvalidRequest, "step %s: %v", st.ID, err)
	}
	var out []candidate
	// Every candidate, in rotation or not: panic is judged on this step's own pool (the
	// capability, provider and constraint it names), as Envoy judges it per cluster.
	res, err := o.cfg.Discovery.Capabilities(ctx, discovery.Query{CapabilityID: st.Capability.ID, Provider: st.Capability.Provider,
		Version: st.Capability.Constraint, IncludeAll: true})
	var ue *discovery.UnavailableError
	switch {
	case err == nil:
		inRotation := 0
		for _, e := range res.Entries {
			if e.Eligibility == "" || e.Panic || apiv1.InRotation(e.Eligibility) {
				inRotation++
			}
		}
		poolPanic := float64(inRotation) < o.cfg.PanicThreshold*float64(len(res.Entries))
		for _, e := range res.Entries {
			if e.Eligibility != "" && !e.Panic && !apiv1.InRotation(e.Eligibility) && !poolPanic {
				continue // out of rotation, in a pool with enough in rotation
			}
			v, _ := semver.NewVersion(e.CapabilityVersion)
			p, _ := apiv1.Priority(e.Metadata)
			out = append(out, candidate{instance: e.InstanceID, endpoint: e.Endpoint, rank: apiv1.Rank{Priority: p, Version: v, Generation: e.Generation}})
		}
	case errors.As(err, &ue) && ue.State == discovery.StateUninitialized && len(o.cfg.Static) > 0:
		for i, s := range o.cfg.Static {
			v, verr := semver.NewVersion(s.Version)
			if s.CapabilityID != st.Capability.ID || (st.Capability.Provider != "" && s.Provider != st.Capability.Provider) || verr != nil || !cons.Check(v) {
				continue
			}
			p, _ := apiv1.Priority(s.Metadata)
			out = append(out, candidate{instance: "static-" + strconv.Itoa(i), endpoint: s.Endpoint, rank: apiv1.Rank{Priority: p, Version: v, Generation: int64(i)}})
		}
	default:
		return nil, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "step %s: discovery unavailable: %v", st.ID, err)
	}
	if len(out) == 0 {
		return nil, apiv1.Errorf(http.StatusServiceUnavailable, apiv1.CodeUnavailable, "step %s: no instance offers %s %s %s",
			st.ID, st.Capability.Provider, st.Capability.ID, st.Capability.Constraint)
	}
	slices.SortStableFunc(out, func(a, b candidate) int { return a.rank.Compare(b.rank) })
	return out, nil
}
