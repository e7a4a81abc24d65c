package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/internal/freeport"
)

// TestTheConsoleServesTLSAndShowsEachIdentityItsShare runs 'meshflows dashboard' with its
// server certificate, the client CA and the RBAC file: a viewer without a certificate is
// sent to the sign-in page, a certificate's identity sees what its roles allow (discover:
// the catalog, not the routes), the admin token signs in to everything, /metrics has the
// certificates' expiry, and the console refuses flags that contradict each other.
func TestTheConsoleServesTLSAndShowsEachIdentityItsShare(t *testing.T) {
	dir, certs := t.TempDir(), devCerts(t, "viewer")
	pem := func(n string) string { return filepath.Join(certs, n) }
	rbac := filepath.Join(dir, "rbac.yaml")
	os.WriteFile(rbac, []byte("identities: {viewer: [viewer]}\nroles:\n  viewer: {discover: true}\n"), 0o600)
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	if out, err := run(context.Background(), "dashboard", "--insecure", "--admin-token-file", token); err == nil || !strings.Contains(err.Error(), "contradicts") {
		t.Errorf("--insecure with an admin token: %v\n%s", err, out)
	}
	if out, err := run(context.Background(), "dashboard", "--client-ca", pem("ca.pem"), "--tls-cert", pem("server.pem"), "--tls-key", pem("server-key.pem")); err == nil || !strings.Contains(err.Error(), "--rbac") {
		t.Errorf("--client-ca without --rbac: %v\n%s", err, out)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	base := "https://" + addr
	anonTLS, err := client.TLSConfig(pem("ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	viewerTLS, err := client.TLSConfig(pem("ca.pem"), pem("viewer.pem"), pem("viewer-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	noRedirect := func(c *http.Client) *http.Client {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	anon, viewer := noRedirect(client.HTTPClient(anonTLS)), noRedirect(client.HTTPClient(viewerTLS))
	startCommandWith(t, anon, base+"/healthz", "dashboard", "--listen", addr, "--registry", "http://127.0.0.1:1", "--gateway", "", "--orchestrator", "",
		"--tls-cert", pem("server.pem"), "--tls-key", pem("server-key.pem"), "--client-ca", pem("ca.pem"), "--rbac", rbac,
		"--admin-token-file", token, "--log-level", "error")
	status := func(c *http.Client, path string) int {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		who  string
		c    *http.Client
		path string
		want int
	}{
		{"no certificate", anon, "/capabilities", http.StatusSeeOther},
		{"no certificate", anon, "/events/export", http.StatusUnauthorized},
		{"viewer", viewer, "/capabilities", http.StatusOK},
		{"viewer", viewer, "/logs", http.StatusOK},
		{"viewer", viewer, "/routes", http.StatusForbidden},
		{"viewer", viewer, "/workflows", http.StatusForbidden},
	} {
		if got := status(c.c, c.path); got != c.want {
			t.Errorf("GET %s as %s = %d, want %d", c.path, c.who, got, c.want)
		}
	}
	resp, err := anon.PostForm(base+"/login", url.Values{"token": {"s3cret"}, "next": {"/routes"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		session = c
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || !session.Secure {
		t.Fatalf("sign-in with the admin token over TLS: %d, cookie %+v (want a Secure one)", resp.StatusCode, session)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/routes", nil)
	req.AddCookie(session)
	if resp, err = anon.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/routes with the admin sign-in = %d", resp.StatusCode)
	}
	resp, err = anon.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `meshflows_certificate_expiry_timestamp_seconds{component="dashboard",role="server"`; !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}
