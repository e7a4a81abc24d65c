// Package jms is the example JMS publisher: the messaging example as provider "jms",
// service egress-jms, warning JMS_HEADER_NON_STANDARD for a content-type header (JMS
// carries it as a message property, not a header).
package jms

import (
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/examples/providers/messaging"
)

// New returns the JMS example provider reached at endpoint.
func New(endpoint, zone string) (*messaging.Provider, error) {
	return messaging.New(messaging.Config{
		Kind: "jms", Endpoint: endpoint, Zone: zone,
		Metadata: map[string]any{"supports_transactions": true},
		Lint:     lint,
	})
}

func lint(req *messaging.PublishRequest) []apiv1.Diagnostic {
	var out []apiv1.Diagnostic
	for k := range req.Headers {
		if strings.EqualFold(k, "content-type") {
			out = append(out, apiv1.Diagnostic{Severity: apiv1.SeverityWarning, Code: "JMS_HEADER_NON_STANDARD",
				Message: "JMS has no content-type header; it is sent as a message property", Path: "request.headers." + k})
		}
	}
	return out
}
