package etcdstore_test

import (
	"context"
	"fmt"
	"testing"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestOperatorActionsAreShared: an evacuation and a withdrawal made through one replica
// hold on the other (which judges, whichever it is), are listed by both, and end on both;
// a replica started later takes them from the store.
func TestOperatorActionsAreShared(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/operators%d/", prefixes.Add(1))
	a, _ := startReplica(t, cli, prefix, "a")
	b, _ := startReplica(t, cli, prefix, "b")
	for i, zone := range []string{"z1", "z2", "z2"} {
		req := &apiv1.RegisterRequest{InstanceID: fmt.Sprintf("i%d", i), ServiceName: "svc", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9", Zone: zone,
			Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
		if _, err := a.Register(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	state := func(r *registry.Registry, id string) string {
		ex, err := r.Explain(id)
		if err != nil {
			return err.Error()
		}
		return ex.State
	}
	registrytest.Until(t, "both replicas serve all three", func() bool {
		for _, id := range []string{"i0", "i1", "i2"} {
			if state(a, id) != apiv1.EligibilityServing || state(b, id) != apiv1.EligibilityServing {
				return false
			}
		}
		return true
	})
	ev, err := b.Evacuate(context.Background(), &apiv1.EvacuationRequest{Zone: "z1", Duration: "1h", Reason: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Override(context.Background(), &apiv1.OverrideRequest{InstanceID: "i2", Action: apiv1.OverrideWithdraw, Duration: "1h", Reason: "shared"}); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "both replicas hold the evacuation and the withdrawal", func() bool {
		return state(a, "i0") == apiv1.EligibilityEvacuated && state(b, "i0") == apiv1.EligibilityEvacuated &&
			state(a, "i2") == apiv1.EligibilityWithdrawn && state(b, "i2") == apiv1.EligibilityWithdrawn
	})
	if l, _ := a.Evacuations(); len(l.Evacuations) != 1 || l.Evacuations[0].ID != ev.ID {
		t.Errorf("replica a lists %+v", l.Evacuations)
	}
	c, _ := startReplica(t, cli, prefix, "c")
	registrytest.Until(t, "a replica started later lists them", func() bool {
		l, _ := c.Evacuations()
		return len(l.Evacuations) == 1 && len(c.Overrides().Overrides) == 1
	})
	if _, err := a.EndEvacuation(context.Background(), ev.ID); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "both replicas start the way back", func() bool {
		return state(a, "i0") == apiv1.EligibilityReturning && state(b, "i0") == apiv1.EligibilityReturning
	})
}
