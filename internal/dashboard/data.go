package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/meshflows/meshflows/client"
	"github.com/meshflows/meshflows/routing"
)

// errNotConfigured answers every call to a component the dashboard was given no URL for.
var errNotConfigured = errors.New("not configured")

// noCapability selects no entry: a discovery query asked for the answer's state alone.
var noCapability = url.Values{"capability_id": {"none.none"}}

// source returns the typed client of the component at base, through hc; without a base, a
// client whose every call fails with errNotConfigured.
func source(base string, hc *http.Client) (*client.Client, error) {
	if base == "" {
		return client.New(client.Config{Registries: []string{"http://not-configured.invalid"}, HTTPClient: &http.Client{Transport: notConfigured{}}})
	}
	return client.New(client.Config{Registries: []string{base}, HTTPClient: hc, Timeout: 35 * time.Second})
}

type notConfigured struct{}

func (notConfigured) RoundTrip(*http.Request) (*http.Response, error) { return nil, errNotConfigured }

// gatewayRoutes is the gateway's /v1/gateway/routes answer: the canonical table (the
// routing package's types) and where it came from.
type gatewayRoutes struct {
	routing.Canonical
	Source           string            `json:"source"`
	AgeSeconds       int64             `json:"age_seconds"`
	RegistryRevision int64             `json:"registry_revision"`
	Reasons          map[string]string `json:"rejection_reasons"`
	// Summary is set when the gateway showed only a summary: the dashboard's identity lacks
	// the gateway_admin permission; FullTable says why.
	Summary    bool   `json:"summary"`
	RouteCount int    `json:"route_count"`
	FullTable  string `json:"full_table"`
}
