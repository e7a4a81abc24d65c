package main

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
	"github.com/meshflows/meshflows/internal/testtool"
)

// TestDNSAgainstDev resolves the example providers through meshflows dev's DNS with Go's
// resolver and with dig.
func TestDNSAgainstDev(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	base, done := startDev(t, ctx)
	t.Cleanup(func() { cancel(); <-done })
	waitDevReady(t, base)
	addr := "127.0.0.1:" + strconv.Itoa(base+devDNSOffset)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	var got []string
	registrytest.Until(t, "both providers answer over DNS", func() bool {
		_, srvs, err := r.LookupSRV(ctx, "", "", "messaging.publish.cap.meshflows.")
		got = got[:0]
		for _, s := range srvs {
			got = append(got, s.Target+":"+strconv.Itoa(int(s.Port)))
		}
		slices.Sort(got)
		return err == nil && len(got) == 2
	})
	want := []string{"egress-jms-" + strconv.Itoa(base+devProviderOffsetJMS) + ".inst.meshflows.:" + strconv.Itoa(base+devProviderOffsetJMS),
		"egress-rabbitmq-" + strconv.Itoa(base+devProviderOffsetRMQ) + ".inst.meshflows.:" + strconv.Itoa(base+devProviderOffsetRMQ)}
	if !slices.Equal(got, want) {
		t.Errorf("SRV = %v, want %v", got, want)
	}
	if ips, err := r.LookupHost(ctx, "_jms.messaging.publish.cap.meshflows."); err != nil || !slices.Equal(ips, []string{"127.0.0.1"}) {
		t.Errorf("A of the jms provider = %v %v", ips, err)
	}
	testtool.Need(t, "apt-get install bind9-dnsutils", "dig")
	out, err := exec.Command("dig", "@127.0.0.1", "-p", strconv.Itoa(base+devDNSOffset), "+short", "TXT", "egress-jms.svc.meshflows.").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "source=fresh") || !strings.Contains(string(out), "in_rotation=1") {
		t.Errorf("dig TXT: %v\n%s", err, out)
	}
}
