// Package rabbitmq is the example RabbitMQ publisher: the messaging example as provider
// "rabbitmq", service egress-rabbitmq.
package rabbitmq

import "github.com/meshflows/meshflows/examples/providers/messaging"

// New returns the RabbitMQ example provider reached at endpoint.
func New(endpoint, zone string) (*messaging.Provider, error) {
	return messaging.New(messaging.Config{
		Kind: "rabbitmq", Endpoint: endpoint, Zone: zone,
		Metadata: map[string]any{"supports_transactions": false, "exchange_type": "topic"},
	})
}
