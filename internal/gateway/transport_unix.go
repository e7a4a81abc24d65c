//go:build unix

package gateway

import "syscall"

// directPath says the direct path is taken: this platform lets a peeker look at a socket.
const directPath = true

// peeker looks at one connection's socket without waiting. It is made once per connection,
// with the function it hands to the socket: a function made at every look, holding the
// result, was an allocation per forwarded request.
type peeker struct {
	raw  syscall.RawConn
	look func(fd uintptr) bool
	ok   bool
	b    [1]byte
}

func newPeeker(raw syscall.RawConn) *peeker {
	p := &peeker{raw: raw}
	p.look = func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.ok = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true
	}
	return p
}

// quiet reports whether the socket holds no unread byte and was not closed by its peer, by
// peeking at it without waiting.
func (p *peeker) quiet() bool {
	p.ok = false
	err := p.raw.Read(p.look)
	return p.ok && err == nil
}
