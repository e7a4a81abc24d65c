package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/etcdstore"
	"github.com/meshflows/meshflows/internal/store/memstore"
)

// openStore opens the store the flags select, and returns what closes it once the server
// has stopped.
func openStore(ctx context.Context, f *registryFlags, logger *slog.Logger) (registry.Store, func() error, error) {
	noClose := func() error { return nil }
	switch f.etcd.store {
	case "memory", "":
		return memstore.New(time.Now), noClose, nil
	case "etcd":
	default:
		return nil, nil, fmt.Errorf("--store %q: want memory or etcd", f.etcd.store)
	}
	if f.restoreSnapshot != "" {
		return nil, nil, errors.New("--restore-snapshot works with --store memory only: etcd keeps the state itself")
	}
	// The client's own zap logs would interleave a second format with ours; errors reach
	// our logs through the store's return values instead.
	cfg := clientv3.Config{Endpoints: f.etcd.endpoints, DialTimeout: f.etcd.dialTimeout, Logger: zap.NewNop()}
	if f.etcd.cacert != "" || f.etcd.cert != "" {
		tlsCfg, err := client.TLSConfig(f.etcd.cacert, f.etcd.cert, f.etcd.key)
		if err != nil {
			return nil, nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd client: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, f.etcd.dialTimeout)
	defer cancel()
	s, err := etcdstore.New(dctx, etcdstore.Config{Client: cli, Prefix: f.etcd.prefix, LeaseTTL: f.leaseTTL, Logger: logger})
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("etcd at %v: %w", f.etcd.endpoints, err)
	}
	return s, cli.Close, nil
}
