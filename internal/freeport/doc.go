// Package freeport hands tests loopback ports to give to servers they start, chosen so that
// nothing else on the machine is likely to take them before the server binds.
//
// The usual way, listening on port 0 and closing, returns a port from the kernel's
// ephemeral range: the range the kernel also takes the local port of every outgoing
// connection from. Between the probe's close and the server's bind, a connection made by
// any other test package running in parallel may take that port, and the server fails with
// "address already in use". This package picks at random below the ephemeral range, where
// the kernel never assigns a port by itself, keeps only ports it could bind, and never gives
// the same port twice in one process. Retry starts a server again, on other ports, should
// another process still take one first.
package freeport
