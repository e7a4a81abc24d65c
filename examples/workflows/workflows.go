// Package workflows holds the example workflows that 'meshflows dev' loads.
package workflows

import _ "embed"

// OrderPublish publishes an order to the jms example provider, then to the rabbitmq one.
//
//go:embed order-publish.yaml
var OrderPublish []byte
