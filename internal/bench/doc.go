// Package bench holds the load generators behind 'meshflows bench': they drive a running
// component through its public HTTP contract only, with bounded loops and timeouts, and
// report throughput and latency percentiles per phase. It also holds the floor servers
// ('bench registry --floor'): servers that do no work, against which the same exchanges say
// what the connection alone costs on the machine at hand.
package bench
