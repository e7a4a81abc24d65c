// Package etcdtest runs a single-member etcd on loopback for tests and benchmarks.
package etcdtest

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
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

// Cluster is an etcd cluster of several members in this process.
type Cluster struct {
	Members   []*embed.Etcd // nil once killed
	Endpoints []string      // the members' client URLs, in member order
}

// StartCluster starts an n-member cluster until the test ends, again on other ports should
// another process take one between freeport's probe and etcd's bind (freeport.Retry). Each
// option changes every member's configuration (ClientTLS, say).
func StartCluster(t testing.TB, n int, options ...func(*embed.Config)) *Cluster {
	t.Helper()
	var c *Cluster
	err := freeport.Retry(func() error {
		var err error
		c, err = tryStartCluster(t, n, options)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientTLS makes the members serve clients over TLS with info (https:// client URLs); with
// info.ClientCertAuth, only clients with a certificate the CA signed.
func ClientTLS(info transport.TLSInfo) func(*embed.Config) {
	return func(cfg *embed.Config) {
		cfg.ClientTLSInfo = info
		for _, us := range [][]url.URL{cfg.ListenClientUrls, cfg.AdvertiseClientUrls} {
			for i := range us {
				us[i].Scheme = "https"
			}
		}
	}
}

func tryStartCluster(t testing.TB, n int, options []func(*embed.Config)) (*Cluster, error) {
	t.Helper()
	names := make([]string, n)
	cus, pus := make([]url.URL, n), make([]url.URL, n)
	var initial []string
	for i := range n {
		names[i] = fmt.Sprintf("m%d", i)
		cus[i], pus[i] = *LoopbackURL(t), *LoopbackURL(t)
		initial = append(initial, names[i]+"="+pus[i].String())
	}
	c := &Cluster{Members: make([]*embed.Etcd, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		cfg := Config(t, names[i], cus[i], pus[i])
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "meshflows-test"
		for _, o := range options {
			o(cfg)
		}
		c.Endpoints = append(c.Endpoints, cfg.AdvertiseClientUrls[0].String())
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			c.Members[i], errs[i] = e, err
		})
	}
	wg.Wait()
	closeAll := func() {
		for _, m := range c.Members {
			if m != nil {
				m.Close()
			}
		}
	}
	for i, err := range errs {
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
	}
	t.Cleanup(closeAll)
	for _, m := range c.Members {
		select {
		case <-m.Server.ReadyNotify():
		case <-time.After(60 * time.Second):
			t.Fatal("cluster not ready")
		}
	}
	return c, nil
}

// Leader returns the index of the member that leads, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m != nil && m.Server.Leader() == m.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Kill stops member i.
func (c *Cluster) Kill(i int) {
	c.Members[i].Close()
	c.Members[i] = nil
}
