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

// TestDNSRefusesARemoteListenWithoutAllowRemote: DNS has no identities, so an address other
// hosts reach needs --allow-remote; loopback ones do not.
func TestDNSRefusesARemoteListenWithoutAllowRemote(t *testing.T) {
	for _, c := range []struct {
		listen string
		allow  bool
		ok     bool
	}{
		{"127.0.0.1:8600", false, true}, {"[::1]:8600", false, true}, {"localhost:8600", false, true},
		{"0.0.0.0:8600", false, false}, {":8600", false, false}, {"10.1.2.3:53", false, false}, {"0.0.0.0:8600", true, true},
	} {
		if err := loopbackOnly(c.listen, c.allow); (err == nil) != c.ok {
			t.Errorf("loopbackOnly(%q, %v) = %v, want ok %v", c.listen, c.allow, err, c.ok)
		}
	}
	out, err := run(context.Background(), "dns", "--listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "--allow-remote") {
		t.Errorf("meshflows dns --listen 0.0.0.0:0: %v\n%s", err, out)
	}
}
