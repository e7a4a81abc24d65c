//go:build unix

package gateway

import "syscall"

// directPath says the direct path is taken: this platform lets quiet look at a socket.
const directPath = true

// quiet reports whether the socket under raw holds no unread byte and was not closed by its
// peer, by peeking at it without waiting.
func quiet(raw syscall.RawConn) bool {
	ok := false
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	})
	return ok && err == nil
}
