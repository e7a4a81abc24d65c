// Package workflows holds the example workflows that 'meshflows dev' loads.
package workflows

import _ "embed"

// OrderPublish publishes an order to the jms example provider, then to the rabbitmq one.
//
//go:embed order-publish.yaml
var OrderPublish []byte

// OrderBatch publishes each order of a batch to the jms example provider in a strict loop,
// then announces the batch on both providers in parallel.
//
//go:embed order-batch.yaml
var OrderBatch []byte
