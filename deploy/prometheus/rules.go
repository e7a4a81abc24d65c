// Package promdeploy carries the Prometheus files of deploy/prometheus into the binary, for
// the commands that start a Prometheus of their own ('meshflows drill').
package promdeploy

import _ "embed"

// Alerts is alerts.yml: the alerting rules, each with its action label.
//
//go:embed alerts.yml
var Alerts []byte
