package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/internal/telemetry"
)

// startFunc starts a component's goroutines in g, serving on ln, until ctx ends.
type startFunc func(ctx context.Context, g *errgroup.Group, ln net.Listener, logger *slog.Logger) error

// runComponent is the life of one long-running command: a buffered JSON logger, a listener
// on addr, the component started in an errgroup, and a wait until Ctrl-C or a failure, with
// the last log lines flushed at the end.
func runComponent(cmd *cobra.Command, logCfg telemetry.LogConfig, addr string, start startFunc) error {
	logOut := telemetry.NewBufferedWriter(cmd.ErrOrStderr())
	logger, err := telemetry.NewLogger(logOut, logCfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	runCtx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	g, ctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return logOut.Run(ctx, logFlushInterval) })
	if err := start(ctx, g, ln, logger); err != nil {
		// Stop what start had begun (the log flusher, an RBAC reload…) before reporting.
		ln.Close()
		cancel()
		return errors.Join(err, g.Wait(), logOut.Flush())
	}
	return errors.Join(g.Wait(), logOut.Flush())
}

// bindLogFlags adds --log-level and --log-format (default format: format) to fs.
func bindLogFlags(fs *pflag.FlagSet, cfg *telemetry.LogConfig, format string) {
	fs.StringVar(&cfg.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&cfg.Format, "log-format", format, "log format: json or text")
	bindLogEnv(fs)
}
