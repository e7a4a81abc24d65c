package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/meshflows/meshflows/client"
)

// errNotConfigured answers every call to a component the dashboard was given no URL for.
var errNotConfigured = errors.New("not configured")

// noCapability selects no entry: a discovery query asked for the answer's state alone.
var noCapability = url.Values{"capability_id": {"none.none"}}

// fleetDelta asks for the changes of the whole fleet since a revision: a long poll on it
// wakes at any change, and answers only what changed.
var fleetDelta = url.Values{"delta": {"true"}}

// source returns the typed client of the component at base, through hc; without a base, a
// client whose every call fails with errNotConfigured.
func source(bases []string, hc *http.Client) (*client.Client, error) {
	if len(bases) == 0 {
		return client.New(client.Config{Registries: []string{"http://not-configured.invalid"}, HTTPClient: &http.Client{Transport: notConfigured{}}})
	}
	return client.New(client.Config{Registries: bases, HTTPClient: hc, Timeout: 35 * time.Second})
}

// nonEmpty is the one URL as a list, or none when it is empty (not configured).
func nonEmpty(u string) []string {
	if u == "" {
		return nil
	}
	return []string{u}
}

type notConfigured struct{}

func (notConfigured) RoundTrip(*http.Request) (*http.Response, error) { return nil, errNotConfigured }
