// Package auth decides who a caller is and what it may do: TLS server configuration with
// client certificates, identities from SPIFFE URI SANs or subject CNs, JWT bearer tokens,
// the RBAC policy file (hot-reloaded, an invalid file refused), the audit log, per-identity
// registration rate limits, and the development CA behind 'meshflows certs'.
//
// The registry's HTTP server consumes it through small interfaces it declares itself; the
// registry core only learns the owner of each instance.
package auth
