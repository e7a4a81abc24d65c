package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/meshflows/meshflows/internal/freeport"
)

// TestRegistryGzipMinBytes starts the registry command with --gzip-min-bytes and asks for a
// discovery answer with Accept-Encoding: gzip: compressed past the threshold, never with 0.
func TestRegistryGzipMinBytes(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want string
	}{
		{"100", "gzip"},
		{"0", ""},
		{"1000000", ""},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			port := freeport.Port(t)
			url := "http://127.0.0.1:" + strconv.Itoa(port)
			startCommand(t, url+"/healthz", "registry", "--insecure", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--gzip-min-bytes", tc.flag)
			body := `{"instance_id":"w1","service_name":"egress-webhook","service_version":"0.1.0","endpoint":"http://127.0.0.1:9000",` +
				`"capabilities":[{"capability_id":"webhook.send","capability_version":"1.2.0","contract_schema_version":"1.0","provider":"webhook"}]}`
			resp, err := http.Post(url+"/v1/services/register", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("register: %s", resp.Status)
			}
			req, _ := http.NewRequest(http.MethodGet, url+"/v1/discovery/capabilities", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			resp, err = tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("Content-Encoding"); resp.StatusCode != http.StatusOK || got != tc.want {
				t.Errorf("--gzip-min-bytes %s: %s, Content-Encoding %q, want %q", tc.flag, resp.Status, got, tc.want)
			}
		})
	}
}
