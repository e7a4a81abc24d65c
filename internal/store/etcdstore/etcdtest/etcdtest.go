// Package etcdtest runs a single-member etcd on loopback for tests and benchmarks.
package etcdtest

import (
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/meshflows/meshflows/internal/freeport"
)

// Server is a running single-member etcd.
type Server struct {
	// Endpoint is its client URL, e.g. http://127.0.0.1:41234.
	Endpoint string
	// Client is connected to it and closed when the test ends.
	Client *clientv3.Client
	// Stop stops the server (once; the test's end stops it too).
	Stop func()
}

// Start runs etcd in this process with its data in a temporary directory, without fsync
// and without logging, until the test ends. Should another process take one of its ports
// between freeport's probe and etcd's bind, it starts again on other ports (freeport.Retry).
func Start(t testing.TB) *Server {
	t.Helper()
	var e *embed.Etcd
	var cu *url.URL
	err := freeport.Retry(func() error {
		cu = LoopbackURL(t)
		cfg := Config(t, "test", *cu, *LoopbackURL(t))
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		var err error
		e, err = embed.StartEtcd(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := sync.OnceFunc(e.Close)
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		t.Fatal("etcd not ready")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cu.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &Server{Endpoint: cu.String(), Client: cli, Stop: stop}
}

// Config returns the configuration of an etcd member named name for a test: clients on
// client, peers on peer, its data in a temporary directory, without fsync and without
// logging. The caller sets the initial cluster.
func Config(t testing.TB, name string, client, peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	return cfg
}

// LoopbackURL returns http://127.0.0.1:PORT with a port from freeport.
func LoopbackURL(t testing.TB) *url.URL {
	t.Helper()
	return &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))}
}
