package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	grpcxds "google.golang.org/grpc/xds"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/freeport"
	"github.com/meshflows/meshflows/internal/health"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestXDSBehindAnIdentity runs 'meshflows xds' with mTLS and an RBAC file: gRPC's own xDS
// client, bootstrapped with TLS channel credentials and an identity whose role grants
// xds: true, resolves xds:///messaging.publish and reaches the registered backend; plaintext,
// no client certificate and an identity without xds are refused, each with its gRPC code;
// and the server refuses to start open without --insecure.
func TestXDSBehindAnIdentity(t *testing.T) {
	certs := devCerts(t, "mesh-client", "nosy")
	rbac := filepath.Join(t.TempDir(), "rbac.yaml")
	os.WriteFile(rbac, []byte("identities: {mesh-client: [mesh], nosy: [reader]}\nroles:\n  mesh: {xds: true}\n  reader: {discover: true}\n"), 0o600)
	m, err := health.NewMonitor(health.MonitorConfig{Engine: health.Config{SlowStart: time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.NewServer(t, registry.Config{Eligibility: m})
	reg.Clock.Advance(registry.DefaultLeaseTTL) // past the warm-up
	backend := startHealthBackend(t)
	registerGRPC(t, reg, backend)

	if out, err := run(context.Background(), "xds", "--listen", "127.0.0.1:0", "--registry", reg.URL); err == nil || !strings.Contains(err.Error(), "refusing to run the xds without authentication") {
		t.Errorf("meshflows xds without credentials or --insecure: %v\n%s", err, out)
	}

	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, "xds", "--listen", addr, "--registry", reg.URL, "--tls-cert", filepath.Join(certs, "server.pem"),
			"--tls-key", filepath.Join(certs, "server-key.pem"), "--client-ca", filepath.Join(certs, "ca.pem"), "--rbac", rbac, "--log-level", "error")
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })
	registrytest.Until(t, "the xDS server listens", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	bootstrap := fmt.Sprintf(`{"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "tls", "config": {"ca_certificate_file": %q, "certificate_file": %q, "private_key_file": %q}}], "server_features": ["xds_v3"]}],
		"node": {"id": "mtls-client", "locality": {"zone": "a"}}}`, addr, filepath.Join(certs, "ca.pem"), filepath.Join(certs, "mesh-client.pem"), filepath.Join(certs, "mesh-client-key.pem"))
	rb, err := grpcxds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///messaging.publish", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	if _, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("gRPC's xDS client over mTLS did not reach the backend: %v", err)
	}

	ca := filepath.Join(certs, "ca.pem")
	for _, c := range []struct {
		name       string
		creds      func() (credentials.TransportCredentials, error)
		want       codes.Code
		wantInText string
	}{
		{"plaintext", func() (credentials.TransportCredentials, error) { return insecure.NewCredentials(), nil }, codes.Unavailable, ""},
		{"no client certificate", tlsCreds(ca, "", ""), codes.Unauthenticated, "no client certificate"},
		{"an identity without xds", tlsCreds(ca, filepath.Join(certs, "nosy.pem"), filepath.Join(certs, "nosy-key.pem")), codes.PermissionDenied, "xds"},
		{"an identity with xds", tlsCreds(ca, filepath.Join(certs, "mesh-client.pem"), filepath.Join(certs, "mesh-client-key.pem")), codes.OK, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			creds, err := c.creds()
			if err != nil {
				t.Fatal(err)
			}
			err = subscribe(ctx, addr, creds)
			if got := status.Code(err); got != c.want || !strings.Contains(fmt.Sprint(err), c.wantInText) {
				t.Errorf("a subscription: %v (code %s), want %s", err, got, c.want)
			}
		})
	}
}

// tlsCreds returns gRPC TLS credentials trusting ca, with a client certificate when given.
func tlsCreds(ca, cert, key string) func() (credentials.TransportCredentials, error) {
	return func() (credentials.TransportCredentials, error) {
		cfg, err := client.TLSConfig(ca, cert, key)
		if err != nil {
			return nil, err
		}
		return credentials.NewTLS(cfg), nil
	}
}

// subscribe opens an ADS stream and waits for the first CDS answer: nil, or why not.
func subscribe(ctx context.Context, addr string, creds credentials.TransportCredentials) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
	if err != nil {
		return err
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "probe"}, TypeUrl: resourcev3.ClusterType}); err != nil {
		if _, rerr := st.Recv(); rerr != nil {
			return rerr
		}
		return err
	}
	_, err = st.Recv()
	return err
}

// startHealthBackend is a gRPC server with the health service, on loopback.
func startHealthBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, grpchealth.NewServer())
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// registerGRPC registers backend as an instance of messaging.publish.
func registerGRPC(t *testing.T, reg *registrytest.Server, backend string) {
	t.Helper()
	req := apiv1.RegisterRequest{InstanceID: "grpc-1", ServiceName: "egress", ServiceVersion: "1.0.0", Endpoint: "http://" + backend, Zone: "a",
		Capabilities: []apiv1.Capability{{CapabilityID: "messaging.publish", CapabilityVersion: "1.0.0", ContractSchemaVersion: "1.0", Provider: "jms"}}}
	if _, err := reg.Registry.Register(context.Background(), &req); err != nil {
		t.Fatal(err)
	}
}
