//go:build !unix

package gateway

import "syscall"

// directPath says the direct path is not taken: on this platform a peeker cannot look at a
// socket, so every request goes through the fallback.
const directPath = false

// peeker cannot look at a socket on this platform.
type peeker struct{}

func newPeeker(syscall.RawConn) *peeker { return nil }

// quiet reports false: a connection that cannot be looked at is never used twice.
func (*peeker) quiet() bool { return false }
