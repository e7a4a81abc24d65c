package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"
)

func (c *Config) setDefaults() {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.HeartbeatInterval == 0 {
		// a third of the TTL, in whole seconds: providers are told the interval in seconds
		c.HeartbeatInterval = max(time.Second, min(DefaultHeartbeatInterval, (c.LeaseTTL/3).Truncate(time.Second)))
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.GatewayTTL == 0 {
		c.GatewayTTL = DefaultGatewayTTL
	}
	if c.SnapshotKeep == 0 {
		c.SnapshotKeep = DefaultSnapshotKeep
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.SummaryInterval == 0 {
		c.SummaryInterval = DefaultSummaryInterval
	}
	if c.OutcomeRate == 0 {
		c.OutcomeRate = DefaultOutcomeRate
	}
	if c.OutcomeBurst == 0 {
		c.OutcomeBurst = DefaultOutcomeBurst
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// regionName is what a region may be called: a DNS label.
var regionName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Region != "" && !regionName.MatchString(c.Region) {
		errs = append(errs, fmt.Errorf("region %q: want a DNS label (lower-case letters, digits, '-')", c.Region))
	}
	if c.LeaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("lease ttl %s is under 1s", c.LeaseTTL))
	}
	if c.HeartbeatInterval%time.Second != 0 {
		errs = append(errs, fmt.Errorf("heartbeat interval %s is not a whole number of seconds (providers are told it in seconds)", c.HeartbeatInterval))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.LeaseTTL {
		errs = append(errs, fmt.Errorf("heartbeat interval %s must be positive and shorter than the lease ttl %s", c.HeartbeatInterval, c.LeaseTTL))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("sweep interval %s must be positive", c.SweepInterval))
	}
	if c.SummaryInterval < 0 {
		errs = append(errs, fmt.Errorf("summary interval %s is negative", c.SummaryInterval))
	}
	if c.StoreTimeout < 0 {
		errs = append(errs, fmt.Errorf("store timeout %s is negative", c.StoreTimeout))
	}
	if c.GatewayTTL < time.Second || c.GatewayTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("gateway ttl %s: want whole seconds, at least 1s (gateways are told to acknowledge every third of it, in seconds)", c.GatewayTTL))
	}
	if c.SnapshotInterval < 0 {
		errs = append(errs, fmt.Errorf("snapshot interval %s is negative", c.SnapshotInterval))
	}
	if c.SnapshotKeep < 1 {
		errs = append(errs, fmt.Errorf("snapshot keep %d: at least one snapshot is kept", c.SnapshotKeep))
	}
	if c.OutcomeBurst < 1 {
		errs = append(errs, fmt.Errorf("outcome burst %d: at least one batch", c.OutcomeBurst))
	}
	if c.SnapshotInterval > 0 && c.SnapshotDir == "" {
		errs = append(errs, errors.New("a snapshot interval needs a snapshot dir"))
	}
	return errors.Join(errs...)
}
