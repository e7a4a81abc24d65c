//go:build !unix

package gateway

import "syscall"

// directPath says the direct path is not taken: on this platform quiet cannot look at a
// socket, so every request goes through the fallback.
const directPath = false

func quiet(syscall.RawConn) bool { return false }
