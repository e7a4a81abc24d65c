package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/examples/workflows"
	"github.com/meshflows/meshflows/internal/gateway"
	"github.com/meshflows/meshflows/internal/journal"
	"github.com/meshflows/meshflows/internal/nameserver"
	"github.com/meshflows/meshflows/internal/prober"
	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/server"
	"github.com/meshflows/meshflows/internal/telemetry"
	"github.com/meshflows/meshflows/internal/workflow"
	"github.com/meshflows/meshflows/routing"
)

// Port plan of 'meshflows dev', fixed for good: offsets from --base-port.
const (
	devRegistryOffset     = 0
	devOrchestratorOffset = 1
	devGatewayOffset      = 2
	devDashboardOffset    = 3
	devDNSOffset          = 5
	devDNSMetricsOffset   = 6
	devXDSOffset          = 7 // N+6 was the DNS metrics' before xDS came
	devProviderOffsetJMS  = 10
	devProviderOffsetRMQ  = 11
)

// devGatewayTTL is the gateway TTL of the dev registry (see registryFlags.gatewayTTL).
const devGatewayTTL = 2 * time.Second

func newDevCmd() *cobra.Command {
	var basePort int
	var logCfg telemetry.LogConfig
	var otlp string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole product on loopback, open and in memory, for trying it out",
		Long: fmt.Sprintf(`Run every MeshFlows component in one process on 127.0.0.1, with an in-memory store and
no authentication. Ports are fixed offsets from --base-port:

  registry      N+%d
  orchestrator  N+%d
  gateway       N+%d
  dashboard     N+%d
  dns           N+%d (UDP and TCP; its /metrics on N+%d)
  xds           N+%d (gRPC ADS, for Envoy and xds:/// gRPC clients)
  providers     N+%d (jms), N+%d (rabbitmq)

Stop with Ctrl-C: the providers deregister and the components stop in order.`,
			devRegistryOffset, devOrchestratorOffset, devGatewayOffset, devDashboardOffset, devDNSOffset, devDNSMetricsOffset, devXDSOffset, devProviderOffsetJMS, devProviderOffsetRMQ),
		Example: "  meshflows dev\n  meshflows dev --base-port 8400",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if basePort < 1 || basePort+devProviderOffsetRMQ > 65535 {
				return fmt.Errorf("--base-port %d: the port plan needs %d..%d within 1..65535", basePort, basePort, basePort+devProviderOffsetRMQ)
			}
			logOut := telemetry.NewBufferedWriter(cmd.ErrOrStderr())
			logger, err := telemetry.NewLogger(logOut, logCfg)
			if err != nil {
				return err
			}
			// Bind the whole port plan before starting anything, so that a busy port fails
			// the command at once instead of after half of the product came up.
			lns, err := listenDevPlan(basePort)
			if err != nil {
				return err
			}
			defer closeListeners(lns) // closing a listener a server has already closed is harmless
			regAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devRegistryOffset)
			ln := lns[devRegistryOffset]
			// Two groups, so that Ctrl-C stops the providers first (they deregister) and the
			// registry after them; a registry that fails stops the providers too.
			regCtx, regCancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer regCancel()
			gReg, regCtx := errgroup.WithContext(regCtx)
			provCtx, provCancel := context.WithCancel(cmd.Context())
			defer provCancel()
			stopProviders := context.AfterFunc(regCtx, provCancel)
			defer stopProviders()
			gProv, provCtx := errgroup.WithContext(provCtx)
			stopAll := func() error { provCancel(); perr := gProv.Wait(); regCancel(); return errors.Join(perr, gReg.Wait()) }

			gReg.Go(func() error { return logOut.Run(regCtx, logFlushInterval) })
			f := registryFlags{
				leaseTTL: registry.DefaultLeaseTTL, heartbeatInterval: registry.DefaultHeartbeatInterval,
				sweepInterval: time.Second, maxBodyBytes: server.DefaultMaxBodyBytes, gzipMinBytes: server.DefaultGzipMinBytes, pollSpacing: server.DefaultPollSpacing, insecure: true, eventsMax: journal.DefaultMax,
				// the gateway is started here and acknowledges every second when told: a registry
				// 2 s old already knows it, so stopping dev right after start does not wait 30 s
				gatewayTTL: devGatewayTTL, otlp: otlp,
				eligibility: eligibilityFlags{slowStart: 30 * time.Second, panicThreshold: 0.5,
					probeConcurrency: prober.DefaultConcurrency, probeTimeout: prober.DefaultTimeout},
			}
			if err := startRegistry(regCtx, gReg, &f, ln, logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			regURL := "http://" + regAddr
			dbAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devDashboardOffset)
			dln := lns[devDashboardOffset]
			dbFlags := dashboardFlags{otlp: otlp, registry: []string{regURL}, insecure: true,
				orchestrator: fmt.Sprintf("http://127.0.0.1:%d", basePort+devOrchestratorOffset),
				gateway:      fmt.Sprintf("http://127.0.0.1:%d", basePort+devGatewayOffset)}
			if err := startDashboard(regCtx, gReg, &dbFlags, dln, logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			orAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devOrchestratorOffset)
			oln := lns[devOrchestratorOffset]
			orFlags := orchestratorFlags{otlp: otlp, insecure: true, registries: []string{regURL}, timeout: workflow.DefaultProviderTimeout, preload: [][]byte{workflows.OrderPublish, workflows.OrderBatch}}
			if err := startOrchestrator(regCtx, gReg, &orFlags, oln, logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			gwAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devGatewayOffset)
			gln := lns[devGatewayOffset]
			gwFlags := gatewayFlags{otlp: otlp, insecure: true, registries: []string{regURL}, cacheTTL: discovery.DefaultTTL, outcomeWindow: 10 * time.Second, verifyEvery: gateway.DefaultRoutesVerifyEvery,
				policy: routing.Policy{"egress-jms": {"/api/messaging/jms"}, "egress-rabbitmq": {"/api/messaging/rabbitmq"},
					"egress-webhook": {"/api/webhook"}}} // the Python example of docs/provider-tutorial.md
			if err := startGateway(regCtx, gReg, &gwFlags, gln, logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			dnsAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devDNSOffset)
			dnsFl := dnsFlags{otlp: otlp, registries: []string{regURL}, domain: nameserver.DefaultDomain, ttl: nameserver.DefaultTTL}
			if err := startDNS(regCtx, gReg, &dnsFl, lns[devDNSOffset], lns[devDNSMetricsOffset], logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			xdsAddr := fmt.Sprintf("127.0.0.1:%d", basePort+devXDSOffset)
			xdsFl := xdsFlags{insecure: true, registries: []string{regURL}, policy: gwFlags.policy}
			if err := startXDS(regCtx, gReg, &xdsFl, lns[devXDSOffset], logger); err != nil {
				return errors.Join(err, stopAll(), logOut.Flush())
			}
			providers := []struct {
				kind   string
				offset int
			}{{"jms", devProviderOffsetJMS}, {"rabbitmq", devProviderOffsetRMQ}}
			for _, pr := range providers {
				pln := lns[pr.offset]
				if err := startExampleProvider(provCtx, gProv, exampleProviderOptions{kind: pr.kind, registries: []string{regURL}, zone: "a", otlp: otlp}, pln, logger); err != nil {
					return errors.Join(err, stopAll(), logOut.Flush())
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "MeshFlows dev — open mode: NO AUTHENTICATION, loopback only, state in memory.\n\n")
			fmt.Fprintf(out, "  registry      http://%s   (try: curl http://%s/v1/discovery/capabilities)\n", regAddr, regAddr)
			fmt.Fprintf(out, "  orchestrator  http://%s   (try: curl -X POST http://%s/v1/workflows/order-publish/run -d '{\"order\":1}')\n", orAddr, orAddr)
			fmt.Fprintf(out, "                (a strict loop and fan-out: curl -X POST http://%s/v1/workflows/order-batch/run -d '{\"batch\":\"b1\",\"orders\":[{\"id\":1},{\"id\":2}]}')\n", orAddr)
			fmt.Fprintf(out, "  gateway       http://%s   (try: curl http://%s/v1/gateway/routes)\n", gwAddr, gwAddr)
			fmt.Fprintf(out, "  dashboard     http://%s   (open it in a browser)\n", dbAddr)
			fmt.Fprintf(out, "  dns           %s    (try: dig @127.0.0.1 -p %d SRV messaging.publish.cap.meshflows. +short)\n", dnsAddr, basePort+devDNSOffset)
			fmt.Fprintf(out, "  xds           %s   (gRPC ADS; a gRPC client's target: xds:///messaging.publish)\n", xdsAddr)
			fmt.Fprintf(out, "  providers     http://127.0.0.1:%d (jms), http://127.0.0.1:%d (rabbitmq)\n",
				basePort+devProviderOffsetJMS, basePort+devProviderOffsetRMQ)
			fmt.Fprintf(out, "                (try: curl -X POST http://%s/api/messaging/jms/publish -d '{\"destination\":\"orders.events\",\"payload\":{\"id\":1}}')\n\n",
				gwAddr)
			fmt.Fprintf(out, "Press Ctrl-C to stop.\n")
			<-provCtx.Done()
			err = stopAll()
			fmt.Fprintf(out, "meshflows dev stopped.\n")
			return errors.Join(err, logOut.Flush())
		},
	}
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the port plan (registry N, orchestrator N+1, gateway N+2, dashboard N+3, dns N+5 (metrics N+6), xds N+7, providers N+10 and N+11)")
	bindLogFlags(cmd.Flags(), &logCfg, "text")
	bindOTLP(cmd.Flags(), &otlp)
	return cmd
}

// devPlan names each port of the dev port plan, by offset from --base-port.
var devPlan = []struct {
	offset int
	name   string
}{
	{devRegistryOffset, "registry"}, {devOrchestratorOffset, "orchestrator"}, {devGatewayOffset, "gateway"},
	{devDashboardOffset, "dashboard"}, {devDNSOffset, "dns"}, {devDNSMetricsOffset, "dns metrics"}, {devXDSOffset, "xds"}, {devProviderOffsetJMS, "jms provider"}, {devProviderOffsetRMQ, "rabbitmq provider"},
}

// errDevPortBusy marks a port of the dev plan that could not be bound.
var errDevPortBusy = errors.New("pick another --base-port")

// listenDevPlan binds every port of the dev plan on loopback, or none of them.
func listenDevPlan(base int) (map[int]net.Listener, error) {
	lns := make(map[int]net.Listener, len(devPlan))
	for _, p := range devPlan {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+p.offset))
		if err != nil {
			closeListeners(lns)
			return nil, fmt.Errorf("%s port %d: %w (%w)", p.name, base+p.offset, err, errDevPortBusy)
		}
		lns[p.offset] = ln
	}
	return lns, nil
}

// closeListeners closes every listener in lns.
func closeListeners(lns map[int]net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}
