// Package notify tells an instance's owner of its defects — a quarantine for flapping, a
// relative or latency outlier, a failing self-report — through the webhook an owners file
// gives the owner (HMAC-signed JSON, retried with backoff), and as a journal event
// owner.notified; at most once per (instance, cause) an hour, and never on the verdict path:
// the eligibility monitor's hook only queues.
package notify
