// Package conformance holds the routing conformance cases (cases/*.json: the shared ones
// from the contract and this project's own) and the test that runs every case file in the
// folder against package routing.
package conformance
