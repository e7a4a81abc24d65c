package etcdstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// sharedJournal runs a store over prefix and a journal of size events shared through it, until
// the test ends.
func sharedJournal(t *testing.T, cli *clientv3.Client, prefix string, size int) (*journal.Journal, *etcdstore.Store) {
	t.Helper()
	s := runStore(t, etcdstore.Config{Client: cli, Prefix: prefix, LeaseTTL: time.Minute})
	j := journal.New(size, nil)
	j.Share(s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.OnEvent(ctx, j.Insert); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { j.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return j, s
}

// TestSharedJournal: two registry replicas over one etcd share the event journal — a
// registration through one and a deregistration through the other are in both journals
// with the same sequence numbers; a replica started later reads what was written before; the
// store is pruned to the bound.
func TestSharedJournal(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/journal%d/", prefixes.Add(1))
	ctx := context.Background()
	replica := func() (*registry.Registry, *journal.Journal, *etcdstore.Store) {
		j, s := sharedJournal(t, cli, prefix, 3)
		reg, err := registry.New(s, registry.Config{Journal: j, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return reg, j, s
	}
	a, ja, _ := replica()
	b, jb, sb := replica()
	req := apiv1.RegisterRequest{InstanceID: "jms-1", ServiceName: "egress-jms", ServiceVersion: "1.0.0", Endpoint: "http://127.0.0.1:9",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	resp, err := a.Register(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	lines := func(j *journal.Journal) []string {
		es, _ := j.Find(journal.Query{})
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%d %s %s", e.Seq, e.Type, e.Subject))
		}
		return out
	}
	// The shared journal numbers a batch by when it reaches etcd, and each replica publishes
	// after a short linger: B deregisters once the registration is in both journals, so that
	// A's batch cannot land after B's on a loaded machine.
	registrytest.Until(t, "B sees the instance and both journals its registration", func() bool {
		_, ok := sb.Get("jms-1")
		return ok && len(lines(ja)) == 1 && len(lines(jb)) == 1
	})
	if err := b.Deregister(ctx, "jms-1", resp.Generation); err != nil {
		t.Fatal(err)
	}
	registrytest.Until(t, "both journals hold both events", func() bool { return len(lines(ja)) == 2 && len(lines(jb)) == 2 })
	if diff := cmp.Diff(lines(ja), lines(jb)); diff != "" {
		t.Errorf("replicas disagree (-a +b):\n%s", diff)
	}
	if got := lines(ja); got[0][len(got[0])-len("instance.registered jms-1"):] != "instance.registered jms-1" {
		t.Errorf("journal = %v", got)
	}
	// the attributes, encoded once by the replica that recorded the event, read back on the other
	if es, _ := jb.Find(journal.Query{Types: []string{apiv1.EventRegistered}}); len(es) != 1 ||
		es[0].Attrs["service_name"] != "egress-jms" || es[0].Attrs["generation"] != float64(resp.Generation) {
		t.Errorf("registration event on the other replica: %+v", es)
	}
	// a replica started later reads what was written before it
	_, jc, _ := replica()
	if diff := cmp.Diff(lines(ja), lines(jc)); diff != "" {
		t.Errorf("a later replica (-a +c):\n%s", diff)
	}
	// the store is pruned to the bound
	for i := range 5 {
		ja.Append(apiv1.Event{Type: apiv1.EventSnapshot, Subject: "registry", Message: fmt.Sprint(i)})
	}
	registrytest.Until(t, "B holds the newest", func() bool { es, _ := jb.Newest(journal.Query{Limit: 1}); return len(es) == 1 && es[0].Message == "4" })
	if err := sb.PruneEvents(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// the newest batches holding at least 3 events stay: the five snapshots' (one to five
	// batches), not the instance's two
	kept, _ := storedEvents(t, cli, prefix)
	var types []string
	for _, e := range kept {
		types = append(types, e.Type)
	}
	if len(kept) < 3 || len(kept) > 5 || slices.Contains(types, apiv1.EventRegistered) || slices.Contains(types, apiv1.EventDeregistered) ||
		kept[len(kept)-1].Message != "4" {
		t.Errorf("events kept in etcd: %v, want the newest 3 to 5 snapshots", types)
	}
}

// storedEvents reads the events stored under prefix, oldest first, and how many keys hold them.
func storedEvents(t *testing.T, cli *clientv3.Client, prefix string) (events []apiv1.Event, keys int) {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+"events/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var batch []apiv1.Event
		if err := json.Unmarshal(kv.Value, &batch); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		events = append(events, batch...)
	}
	return events, len(resp.Kvs)
}

// TestSharedJournalBurst: a burst of events goes to etcd in few keys, and every
// replica — those running and one started afterwards, which reads them from etcd — holds
// them in the order they were appended, with the same numbers.
func TestSharedJournalBurst(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/burst%d/", prefixes.Add(1))
	replica := func() (*journal.Journal, *etcdstore.Store) {
		return sharedJournal(t, cli, prefix, 1000)
	}
	a, sa := replica()
	b, _ := replica()
	const n = 300
	for i := range n {
		a.Append(apiv1.Event{Type: apiv1.EventRegistered, Subject: fmt.Sprintf("i-%03d", i)})
	}
	held := func(j *journal.Journal) []string {
		es, _ := j.Find(journal.Query{Limit: journal.MaxLimit})
		out := make([]string, 0, len(es))
		for _, e := range es {
			out = append(out, fmt.Sprintf("%d %s", e.Seq, e.Subject))
		}
		return out
	}
	registrytest.Until(t, "both journals hold the burst", func() bool { return len(held(a)) == n && len(held(b)) == n })
	want := held(a)
	for i, line := range want {
		if _, subject, _ := strings.Cut(line, " "); subject != fmt.Sprintf("i-%03d", i) {
			t.Fatalf("event %d is %q: out of order", i, line)
		}
	}
	if diff := cmp.Diff(want, held(b)); diff != "" {
		t.Errorf("replicas disagree (-a +b):\n%s", diff)
	}
	// a takes the batches it wrote as they were, b decodes them: the same events
	all := func(j *journal.Journal) []apiv1.Event {
		es, _ := j.Find(journal.Query{Limit: journal.MaxLimit})
		return es
	}
	if diff := cmp.Diff(all(a), all(b)); diff != "" {
		t.Errorf("the writer's events and a reader's differ (-a +b):\n%s", diff)
	}
	if n := etcdstore.OwnBatches(sa); n != 0 {
		t.Errorf("%d batches of the writer still held after the watch brought them back", n)
	}
	c, _ := replica()
	if diff := cmp.Diff(want, held(c)); diff != "" {
		t.Errorf("a replica started afterwards (-a +c):\n%s", diff)
	}
	events, keys := storedEvents(t, cli, prefix)
	if len(events) != n || keys > n/2 {
		t.Errorf("%d events stored in %d keys; want %d in batches, a key each", len(events), keys, n)
	}
}

// TestSharedJournalReadsEarlierForm: a key of one event (the form of registries before
// batches were one key) is read by a replica and counted as one event when pruning.
func TestSharedJournalReadsEarlierForm(t *testing.T) {
	cli := startEtcd(t)
	prefix := fmt.Sprintf("/earlier%d/", prefixes.Add(1))
	ctx := context.Background()
	for i, subject := range []string{"old-1", "old-2"} {
		val := fmt.Sprintf(`{"seq":0,"time":"2026-11-30T12:00:0%dZ","type":%q,"severity":"info","subject":%q,"message":"m","attrs":{"generation":7}}`,
			i, apiv1.EventRegistered, subject)
		if _, err := cli.Put(ctx, fmt.Sprintf("%sevents/older/%016d", prefix, i+1), val); err != nil {
			t.Fatal(err)
		}
	}
	j, s := sharedJournal(t, cli, prefix, 10)
	j.Append(apiv1.Event{Type: apiv1.EventSnapshot, Subject: "registry", Message: "new"})
	subjects := func() []string {
		es, _ := j.Find(journal.Query{})
		var out []string
		for _, e := range es {
			out = append(out, e.Subject)
		}
		return out
	}
	registrytest.Until(t, "the journal holds the earlier events and the new one", func() bool { return len(subjects()) == 3 })
	if diff := cmp.Diff([]string{"old-1", "old-2", "registry"}, subjects()); diff != "" {
		t.Errorf("journal (-want +got):\n%s", diff)
	}
	if es, _ := j.Find(journal.Query{Types: []string{apiv1.EventRegistered}}); len(es) != 2 || es[0].Attrs["generation"] != float64(7) {
		t.Errorf("earlier events read as %+v", es)
	}
	if err := s.PruneEvents(ctx, 2); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, prefix+"events/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), prefix+"events/"))
	}
	if len(keys) != 2 || !slices.Contains(keys, fmt.Sprintf("older/%016d", 2)) {
		t.Errorf("kept %v, want the second earlier key and the new batch", keys)
	}
}
