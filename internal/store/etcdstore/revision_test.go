package etcdstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
)

// TestARevisionHoldsEveryEarlierWrite: a revision a replica answers at holds every write etcd
// made up to it, its own and other replicas' alike. A replica's own registration lands in its
// view at once, but its revision may show only once the watch has brought in what other
// replicas wrote before it: were it to show at once, an answer at that revision would miss
// their writes, and — answers being cached, and long polls woken, by revision — go on missing
// them after they arrive, until some later change.
func TestARevisionHoldsEveryEarlierWrite(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/prefix%d/", prefixes.Add(1))
	ctx := context.Background()
	open := func() *etcdstore.Store {
		s, err := etcdstore.New(ctx, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := open(), open() // A's watch is not running yet: it has not seen what B writes
	other, own := record("other"), record("own")
	if err := b.Register(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := a.Register(ctx, own); err != nil {
		t.Fatal(err)
	}
	if own.Generation <= other.Generation {
		t.Fatalf("generations %d (own) and %d (other): want own's later", own.Generation, other.Generation)
	}
	if _, ok := a.Get("own"); !ok {
		t.Error("A does not read its own registration at once")
	}
	without, _ := a.Watch() // the revision A answers at before the watch brings B's write
	if _, ok := a.Get("other"); ok {
		t.Fatal("A holds B's write without a watch: the test does not test what it says")
	}
	if without >= other.Generation {
		t.Errorf("A answers at revision %d without B's write of revision %d", without, other.Generation)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Until(t, "A's revision reaches its own registration", func() bool { rev, _ := a.Watch(); return rev >= own.Generation })
	if _, ok := a.Get("other"); !ok {
		t.Errorf("A answers at revision %d without B's write of revision %d", own.Generation, other.Generation)
	}
	if got := a.Query(&registry.Query{CapabilityID: "a.b"}); len(got) != 2 {
		t.Errorf("A's answer holds %d entries, want 2", len(got))
	}
}
