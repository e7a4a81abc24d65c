// Package incident keeps the incidents the eligibility engine raises for people — an
// instance quarantined for flapping, a (capability, zone) in panic, the registry in
// self-preservation — with their acknowledgement and resolution. Conditions that end resolve
// their incident by themselves; people acknowledge and resolve through the registry API
// (GET /v1/incidents) and the dashboard's Incidents page.
package incident
