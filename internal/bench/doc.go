// Package bench holds the load generators behind 'meshflows bench': they drive a running
// component through its public HTTP contract only, with bounded loops and timeouts, and
// report throughput and latency percentiles per phase.
package bench
