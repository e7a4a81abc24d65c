// Package workflow reads workflow YAML (docs/reference/workflows.md) and validates it in layers:
// the contract layer (local: every rule, every problem of a file at once, each diagnostic
// with its dotted path, line and column), resolution against discovery, and the providers'
// own validation. The YAML is parsed into a small tree that keeps the position of every key
// and value, so that a diagnostic — a provider's included — points at the line it concerns.
package workflow
