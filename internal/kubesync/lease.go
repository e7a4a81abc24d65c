package kubesync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	Leases          LeaseAPI
	Namespace, Name string // the Lease's
	Identity        string // this replica's (its pod name): the holder it writes
	// LeaseDuration is how long a holder that stops renewing keeps the Lease from the
	// others (default 15 s); RetryPeriod how often the holder renews and a candidate tries
	// (default 2 s). A leader that cannot renew within LeaseDuration steps down.
	LeaseDuration, RetryPeriod time.Duration
	Clock                      Clock
	Logger                     *slog.Logger
	Metrics                    *Metrics
}

// Validate reports a configuration that cannot run.
func (c *ElectorConfig) Validate() error {
	switch {
	case c.Leases == nil:
		return errors.New("kubesync: leader election needs a coordination.k8s.io client")
	case c.Namespace == "" || c.Name == "":
		return errors.New("kubesync: leader election needs the Lease's namespace and name")
	case c.Identity == "":
		return errors.New("kubesync: leader election needs this replica's identity")
	case c.RetryPeriod >= c.LeaseDuration:
		return fmt.Errorf("kubesync: the retry period %s must be shorter than the lease duration %s", c.RetryPeriod, c.LeaseDuration)
	}
	return nil
}

// Elector elects one leader among the replicas that share a coordination.k8s.io Lease: the
// one holding it runs the syncer, the others stand by and take over once the holder has not
// renewed it for a lease duration (as measured on their own clocks: a holder's clock is
// never compared with theirs).
type Elector struct {
	cfg ElectorConfig
	// what a candidate last saw of the Lease, and when (its own clock)
	seen   string
	seenAt time.Time
}

// NewElector returns an Elector for cfg.
func NewElector(cfg ElectorConfig) (*Elector, error) {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		m, err := newMetrics(nil)
		if err != nil {
			return nil, err
		}
		cfg.Metrics = m
	}
	return &Elector{cfg: cfg}, nil
}

// Run stands by until this replica holds the Lease, runs lead while it does, and stands by
// again when it loses it (lead's ctx ends first, and Run waits for lead to return), until
// ctx ends; then a Lease it holds is released so that a successor need not wait. An error
// of lead ends Run.
func (e *Elector) Run(ctx context.Context, lead func(context.Context) error) error {
	for {
		if err := e.acquire(ctx); err != nil {
			return nil // ctx ended while standing by
		}
		e.cfg.Logger.Info("kube-sync: leading", slog.String("lease", e.cfg.Namespace+"/"+e.cfg.Name), slog.String("identity", e.cfg.Identity))
		e.cfg.Metrics.leader.Set(1)
		err := e.hold(ctx, lead)
		e.cfg.Metrics.leader.Set(0)
		if ctx.Err() != nil {
			e.release()
			return err
		}
		if err != nil {
			e.release()
			return err
		}
		e.cfg.Logger.Warn("kube-sync: lost the lease, standing by", slog.String("lease", e.cfg.Namespace+"/"+e.cfg.Name))
	}
}

// acquire tries every RetryPeriod until this replica holds the Lease or ctx ends.
func (e *Elector) acquire(ctx context.Context) error {
	announced := false
	for {
		ok, holder, err := e.try(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.cfg.Metrics.errors.WithLabelValues("lease").Inc()
			e.cfg.Logger.Warn("kube-sync: could not read or take the lease", slog.Any("error", err))
		case ok:
			return nil
		case !announced:
			e.cfg.Logger.Info("kube-sync: standing by", slog.String("leader", holder))
			announced = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.cfg.Clock.After(e.cfg.RetryPeriod):
		}
	}
}

// hold runs lead and renews the Lease every RetryPeriod; when renewals have failed for a
// lease duration (another may take it now) lead's context ends.
func (e *Elector) hold(ctx context.Context, lead func(context.Context) error) error {
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- lead(leadCtx) }()
	renewed := e.cfg.Clock.Now()
	for {
		select {
		case err := <-done:
			return err
		case <-e.cfg.Clock.After(e.cfg.RetryPeriod):
		}
		ok, holder, err := e.try(ctx)
		switch {
		case ok:
			renewed = e.cfg.Clock.Now()
			continue
		case err == nil:
			e.cfg.Logger.Warn("kube-sync: another replica holds the lease", slog.String("leader", holder))
		case e.cfg.Clock.Now().Sub(renewed) < e.cfg.LeaseDuration-e.cfg.RetryPeriod:
			e.cfg.Metrics.errors.WithLabelValues("lease").Inc()
			e.cfg.Logger.Warn("kube-sync: could not renew the lease", slog.Any("error", err))
			continue
		default:
			e.cfg.Metrics.errors.WithLabelValues("lease").Inc()
			e.cfg.Logger.Error("kube-sync: could not renew the lease for a lease duration: stepping down", slog.Any("error", err))
		}
		cancel()
		return <-done
	}
}

// try takes or renews the Lease once: it reports whether this replica holds it, and who
// does otherwise.
func (e *Elector) try(ctx context.Context) (bool, string, error) {
	leases := e.cfg.Leases
	now := metav1.NewMicroTime(e.cfg.Clock.Now())
	secs := int32(e.cfg.LeaseDuration / time.Second)
	rctx, cancel := context.WithTimeout(ctx, e.cfg.RetryPeriod)
	defer cancel()
	l, err := leases.GetLease(rctx, e.cfg.Namespace, e.cfg.Name)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &e.cfg.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}
		if err := leases.CreateLease(rctx, l); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return false, "", nil // another was first: seen at the next try
			}
			return false, "", fmt.Errorf("create lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
		}
		return true, e.cfg.Identity, nil
	}
	if err != nil {
		return false, "", fmt.Errorf("get lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder != e.cfg.Identity && holder != "" {
		// another's: taken only once it has not changed for its duration on this clock
		if l.ResourceVersion != e.seen {
			e.seen, e.seenAt = l.ResourceVersion, e.cfg.Clock.Now()
		}
		d := e.cfg.LeaseDuration
		if l.Spec.LeaseDurationSeconds != nil {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if e.cfg.Clock.Now().Sub(e.seenAt) < d {
			return false, holder, nil
		}
	}
	if holder != e.cfg.Identity {
		l.Spec.AcquireTime = &now
		if l.Spec.LeaseTransitions == nil {
			l.Spec.LeaseTransitions = new(int32)
		}
		*l.Spec.LeaseTransitions++
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &e.cfg.Identity, &secs, &now
	if err := leases.UpdateLease(rctx, l); err != nil {
		if apierrors.IsConflict(err) {
			return false, holder, nil // changed under us: another renewed or took it
		}
		return false, holder, fmt.Errorf("update lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
	}
	return true, e.cfg.Identity, nil
}

// release gives up a Lease this replica holds (its holder emptied), so that a successor
// takes it at once instead of after a lease duration.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	leases := e.cfg.Leases
	l, err := leases.GetLease(ctx, e.cfg.Namespace, e.cfg.Name)
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.cfg.Identity {
		return
	}
	empty := ""
	l.Spec.HolderIdentity = &empty
	if err := leases.UpdateLease(ctx, l); err != nil {
		e.cfg.Logger.Warn("kube-sync: could not release the lease (a successor takes it after a lease duration)", slog.Any("error", err))
		return
	}
	e.cfg.Logger.Info("kube-sync: released the lease")
}
