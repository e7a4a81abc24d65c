// Package messaging is the example messaging provider that the jms and rabbitmq examples
// build on: an in-memory broker behind docs/reference/api.md's example-provider endpoints, the
// messaging.publish capability's validate and invoke handlers, and a provider.Agent that
// keeps it registered. It shows what a third-party provider writes with the SDK.
package messaging
