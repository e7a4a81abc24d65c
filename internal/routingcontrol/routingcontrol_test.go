package routingcontrol_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/routingcontrol"
	"github.com/meshflows/meshflows/internal/store/etcdstore/etcdtest"
	"github.com/meshflows/meshflows/internal/testtool"
)

func codeOf(err error) string {
	var e *apiv1.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// TestSafetyRules walks one signal through the operator actions: each step's outcome, and
// the audit record every action leaves, refusals included.
func TestSafetyRules(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := &testtool.OffsetClock{}
	c, err := routingcontrol.New(routingcontrol.Config{Client: srv.Client, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []struct {
		name    string
		advance time.Duration
		change  routingcontrol.Change
		code    string
		outcome string
	}{
		{"off of a region never declared", 0, routingcontrol.Change{Region: "eu-west", Reason: "x"}, apiv1.CodeUnknownRegion, "refused"},
		{"no reason", 0, routingcontrol.Change{Region: "eu-west", On: true}, apiv1.CodeInvalidRequest, ""},
		{"not a DNS label", 0, routingcontrol.Change{Region: "EU West", On: true, Reason: "x"}, apiv1.CodeInvalidRequest, ""},
		{"declare eu-west", 0, routingcontrol.Change{Region: "eu-west", On: true, Reason: "setup"}, "", "done"},
		{"declare us-east", 0, routingcontrol.Change{Region: "us-east", On: true, Reason: "setup"}, "", "done"},
		{"on again changes nothing", 0, routingcontrol.Change{Region: "us-east", On: true, Reason: "again"}, "", "unchanged"},
		{"off within the interval", time.Second, routingcontrol.Change{Region: "eu-west", Reason: "drill"}, apiv1.CodeRateLimited, "refused"},
		{"off after the interval", 30 * time.Second, routingcontrol.Change{Region: "eu-west", Reason: "drill"}, "", "done"},
		{"off of the last region on", 0, routingcontrol.Change{Region: "us-east", Reason: "drill"}, apiv1.CodeRegionUnsafe, "refused"},
		{"forced off of the last region on", 0, routingcontrol.Change{Region: "us-east", Reason: "drill", Force: true}, apiv1.CodeRegionUnsafe, "refused"},
		{"eu-west back", 30 * time.Second, routingcontrol.Change{Region: "eu-west", On: true, Reason: "drill over"}, "", "done"},
	}
	var audited []string
	for _, s := range steps {
		clock.Advance(s.advance)
		s.change.By = "operator"
		_, err := c.Set(ctx, s.change)
		if got := codeOf(err); got != s.code {
			t.Fatalf("%s: code %q, want %q (%v)", s.name, got, s.code, err)
		}
		if s.outcome != "" {
			audited = append(audited, s.change.Region+" "+s.outcome)
		}
	}
	recs, err := c.Audit(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Region+" "+r.Outcome)
		if r.By != "operator" || r.At.IsZero() || r.Reason == "" {
			t.Errorf("audit record without who, when or why: %+v", r)
		}
	}
	if diff := cmp.Diff(audited, got); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	st, err := c.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"eu-west", "us-east"}, st.On); diff != "" || len(st.Off) != 0 {
		t.Errorf("on %v off %v", st.On, st.Off)
	}
	if r := st.Regions["eu-west"]; r.Reason != "drill over" || r.By != "operator" {
		t.Errorf("eu-west: %+v", r)
	}
}

// TestMinRegionsOn: with min_regions_on 2 of three regions, one may go off, a second only
// with --force, and never the third.
func TestMinRegionsOn(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := &testtool.OffsetClock{}
	c, _ := routingcontrol.New(routingcontrol.Config{Client: srv.Client, Now: clock.Now})
	ctx := context.Background()
	for _, r := range []string{"a", "b", "c"} {
		if _, err := c.Set(ctx, routingcontrol.Change{Region: r, On: true, Reason: "setup", By: "op"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Configure(ctx, routingcontrol.Settings{MinRegionsOn: 2, Reason: "two to carry the load", By: "op"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	for _, s := range []struct {
		region string
		force  bool
		code   string
	}{
		{"a", false, ""},
		{"b", false, apiv1.CodeRegionUnsafe},
		{"b", true, ""},
		{"c", true, apiv1.CodeRegionUnsafe},
	} {
		_, err := c.Set(ctx, routingcontrol.Change{Region: s.region, Reason: "test", By: "op", Force: s.force})
		if got := codeOf(err); got != s.code {
			t.Fatalf("off %s force %v: %q, want %q (%v)", s.region, s.force, got, s.code, err)
		}
	}
}

// TestConcurrentOffsKeepOneOn: two operators switching off the two last regions at once
// cannot both succeed: the rule is checked in the transaction.
func TestConcurrentOffsKeepOneOn(t *testing.T) {
	srv := etcdtest.Start(t)
	clock := &testtool.OffsetClock{}
	ctx := context.Background()
	setup, _ := routingcontrol.New(routingcontrol.Config{Client: srv.Client, Now: clock.Now})
	for _, r := range []string{"a", "b"} {
		if _, err := setup.Set(ctx, routingcontrol.Change{Region: r, On: true, Reason: "setup", By: "op"}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	for range 5 {
		errs := make(chan error, 2)
		for _, r := range []string{"a", "b"} {
			go func() {
				c, _ := routingcontrol.New(routingcontrol.Config{Client: srv.Client, Now: clock.Now})
				_, err := c.Set(ctx, routingcontrol.Change{Region: r, Reason: "race", By: "op-" + r})
				errs <- err
			}()
		}
		e1, e2 := <-errs, <-errs
		st, err := setup.Status(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.On) != 1 || (e1 == nil) == (e2 == nil) {
			t.Fatalf("on %v, errors %v and %v: want exactly one region off", st.On, e1, e2)
		}
		off := st.Off[0]
		clock.Advance(time.Minute)
		if _, err := setup.Set(ctx, routingcontrol.Change{Region: off, On: true, Reason: "again", By: "op"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
}

// TestWatcherKeepsTheLastSignalWithoutQuorum: a watcher sees a change within a second; when
// two of three members are gone it keeps the signal, marked stale (never taken as off), and
// is current again once quorum is back.
func TestWatcherKeepsTheLastSignalWithoutQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-member etcd cluster")
	}
	cl := etcdtest.StartCluster(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: cl.Endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &testtool.OffsetClock{}
	c, _ := routingcontrol.New(routingcontrol.Config{Client: cli, Now: clock.Now})
	for _, r := range []string{"a", "b"} {
		if _, err := c.Set(ctx, routingcontrol.Change{Region: r, On: true, Reason: "setup", By: "op"}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	reg := prometheus.NewPedanticRegistry()
	w, err := routingcontrol.NewWatcher(routingcontrol.WatcherConfig{Client: cli, Check: 200 * time.Millisecond,
		Timeout: 500 * time.Millisecond, StaleAfter: time.Second, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitFor(t, 5*time.Second, "first read", func() bool { return w.View().Read })
	start := time.Now()
	if _, err := c.Set(ctx, routingcontrol.Change{Region: "a", Reason: "drill", By: "op"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "a off", func() bool { v := w.View(); return !v.On("a") && v.On("b") })
	t.Logf("off seen in %s", time.Since(start))

	lead := cl.Leader()
	cl.Kill((lead + 1) % 3)
	cl.Kill((lead + 2) % 3)
	waitFor(t, 10*time.Second, "stale", func() bool { return w.View().Stale })
	if v := w.View(); v.On("a") || !v.On("b") {
		t.Errorf("without quorum the view changed: a on %v, b on %v", v.On("a"), v.On("b"))
	}
	if got := testutil.ToFloat64(mustGauge(t, reg, "meshflows_routing_control_stale")); got != 1 {
		t.Errorf("stale gauge %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func mustGauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
