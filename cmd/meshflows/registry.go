package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/internal/telemetry"
)

// logFlushInterval is how long a log line may wait in the buffer before it is written.
const logFlushInterval = 100 * time.Millisecond

// registryFlags are the flags of 'meshflows registry'.
type registryFlags struct {
	listen            string
	leaseTTL          time.Duration
	heartbeatInterval time.Duration
	sweepInterval     time.Duration
	maxBodyBytes      int64
	snapshotDir       string
	snapshotInterval  time.Duration
	restoreSnapshot   string
	insecure          bool
	log               telemetry.LogConfig
}

func (f *registryFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7400", "address the registry API listens on")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", registry.DefaultLeaseTTL, "lease TTL: an instance without a heartbeat for this long is evicted; also the warm-up window after an empty start")
	fs.DurationVar(&f.heartbeatInterval, "heartbeat-interval", registry.DefaultHeartbeatInterval, "heartbeat interval told to providers (must be shorter than --lease-ttl)")
	fs.DurationVar(&f.sweepInterval, "sweep-interval", registry.DefaultSweepInterval, "how often expired leases are evicted")
	fs.Int64Var(&f.maxBodyBytes, "max-body-bytes", server.DefaultMaxBodyBytes, "largest request body accepted; larger ones get 413 PAYLOAD_TOO_LARGE")
	fs.StringVar(&f.snapshotDir, "snapshot-dir", "", "directory for snapshot files (POST /v1/admin/snapshot and --snapshot-interval)")
	fs.DurationVar(&f.snapshotInterval, "snapshot-interval", 0, "write a snapshot to --snapshot-dir this often (0: only on demand)")
	fs.StringVar(&f.restoreSnapshot, "restore-snapshot", "", "load this snapshot file at start; restored leases get a full TTL")
	fs.BoolVar(&f.insecure, "insecure", false, "serve without authentication (development only: anyone who reaches the port can register and deregister)")
	fs.StringVar(&f.log.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.log.Format, "log-format", "json", "log format: json or text")
}

func newRegistryCmd() *cobra.Command {
	var f registryFlags
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "Run the registry server on the embedded store",
		Long: `Run the registry server: providers register capabilities and heartbeat their leases,
consumers discover them (API.md, "Registry"). State lives in memory; use --snapshot-dir and
--restore-snapshot to carry it over a restart.

Authentication (mTLS, JWT) is not built yet, so the registry refuses to start unless
--insecure says that running open is intended.`,
		Example: `  meshflows registry --insecure
  meshflows registry --insecure --listen 127.0.0.1:7400 --snapshot-dir /var/lib/meshflows --snapshot-interval 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logOut := telemetry.NewBufferedWriter(cmd.ErrOrStderr())
			logger, err := telemetry.NewLogger(logOut, f.log)
			if err != nil {
				return err
			}
			if !f.insecure {
				return errors.New("refusing to run without authentication: mTLS and JWT are not available yet; pass --insecure to run the registry open (development only)")
			}
			ln, err := net.Listen("tcp", f.listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", f.listen, err)
			}
			g, ctx := errgroup.WithContext(cmd.Context())
			g.Go(func() error { return logOut.Run(ctx, logFlushInterval) })
			if err := startRegistry(ctx, g, &f, ln, logger); err != nil {
				ln.Close()
				logOut.Flush()
				return err
			}
			err = g.Wait()
			logger.Info("registry stopped")
			return errors.Join(err, logOut.Flush())
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

// startRegistry builds the registry on a memory store and starts its loops and its HTTP
// server on ln in g; they stop when ctx ends.
func startRegistry(ctx context.Context, g *errgroup.Group, f *registryFlags, ln net.Listener, logger *slog.Logger) error {
	if f.insecure {
		logger.Warn("INSECURE: the registry runs without authentication; anyone who reaches " + ln.Addr().String() +
			" can register, heartbeat and deregister any instance. Never use --insecure outside development.")
	}
	promReg := telemetry.NewRegistry()
	store := memstore.New(time.Now)
	reg, err := registry.New(store, registry.Config{
		LeaseTTL:          f.leaseTTL,
		HeartbeatInterval: f.heartbeatInterval,
		SweepInterval:     f.sweepInterval,
		SnapshotDir:       f.snapshotDir,
		SnapshotInterval:  f.snapshotInterval,
		Logger:            logger,
		Registerer:        promReg,
	})
	if err != nil {
		return err
	}
	if f.restoreSnapshot != "" {
		start := time.Now()
		snap, err := reg.RestoreSnapshot(ctx, f.restoreSnapshot)
		if err != nil {
			return err
		}
		logger.Info("snapshot restored", slog.String("path", f.restoreSnapshot), slog.Int("instances", snap.InstanceCount),
			slog.String("registry_epoch", snap.RegistryEpoch), slog.Int64("revision", snap.Revision),
			slog.String("took", time.Since(start).String()))
	}
	srv, err := server.New(reg, server.Config{MaxBodyBytes: f.maxBodyBytes, Logger: logger, Registerer: promReg, Gatherer: promReg})
	if err != nil {
		return err
	}
	logger.Info("registry listening", slog.String("addr", ln.Addr().String()), slog.String("store", store.Name()),
		slog.String("registry_epoch", store.Epoch().ID), slog.String("lease_ttl", reg.Config().LeaseTTL.String()),
		slog.Int("pid", os.Getpid()))
	g.Go(func() error { return reg.Run(ctx) })
	g.Go(func() error { return srv.Serve(ctx, ln) })
	return nil
}
