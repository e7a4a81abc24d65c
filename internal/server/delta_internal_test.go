package server

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/meshflows/meshflows/internal/registry"
)

// TestDeltaLogIsBoundedByBytes: the log keeps at most its bound of bodies (and the body just
// built, however large), drops the least recently used query first, accounts a body replaced
// at a new state, and never drops the query being answered.
func TestDeltaLogIsBoundedByBytes(t *testing.T) {
	d := newDeltaLog(1000)
	evicted := 0
	d.evicted = func() { evicted++ }
	body := func(n int) func() ([]byte, error) {
		return func() ([]byte, error) { return bytes.Repeat([]byte("x"), n), nil }
	}
	st := registry.State{Epoch: "e", Revision: 1}
	sum := func() (n int64) {
		for _, b := range d.m {
			n += int64(len(b.reset))
			for _, f := range b.from {
				n += int64(len(f))
			}
		}
		return n
	}
	check := func(step string, keys ...string) {
		t.Helper()
		if got := sum(); got != d.bytes {
			t.Errorf("%s: the log counts %d bytes, holds %d", step, d.bytes, got)
		}
		var held []string
		for _, k := range keys {
			if d.m[k] != nil {
				held = append(held, k)
			}
		}
		if fmt.Sprint(held) != fmt.Sprint(keys) || len(d.m) != len(keys) {
			t.Errorf("%s: holds %d queries %v, want %v", step, len(d.m), held, keys)
		}
	}
	for _, k := range []string{"a", "b", "c"} {
		d.load(k, st, -1, body(300))
	}
	check("three resets of 300", "a", "b", "c")
	d.load("a", st, -1, body(999)) // a read: a is now the most recently used
	d.load("d", st, -1, body(300))
	check("a fourth: b, the least recently used, goes", "a", "c", "d")
	d.load("e", st, 5, body(2000))
	check("a body over the bound alone: only it stays", "e")
	d.load("e", registry.State{Epoch: "e", Revision: 2}, -1, body(100))
	check("the same query at a new state replaces its bodies", "e")
	if d.bytes != 100 || evicted != 4 {
		t.Errorf("%d bytes held and %d evictions, want 100 and 4", d.bytes, evicted)
	}
}
