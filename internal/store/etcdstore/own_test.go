package etcdstore

import "testing"

func TestOwnWrites(t *testing.T) {
	type step struct {
		op       string // hold, take, forget, reset
		key, val string
		v        int
		wantV    int
		wantOK   bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		held  int
	}{
		{"taken once for the value written", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "take", key: "k", val: "a", wantV: 1, wantOK: true},
			{op: "take", key: "k", val: "a"},
		}, 0},
		{"another value is not taken", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "take", key: "k", val: "b"},
		}, 1},
		{"an earlier write of the key comes back first", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "hold", key: "k", val: "b", v: 2},
			{op: "take", key: "k", val: "a"},
			{op: "take", key: "k", val: "b", wantV: 2, wantOK: true},
		}, 0},
		{"another key", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "take", key: "j", val: "a"},
		}, 1},
		{"a failed write is forgotten", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "hold", key: "j", val: "a", v: 2},
			{op: "forget", key: "k"},
			{op: "take", key: "k", val: "a"},
		}, 1},
		{"a resync drops all", []step{
			{op: "hold", key: "k", val: "a", v: 1},
			{op: "hold", key: "j", val: "a", v: 2},
			{op: "reset"},
			{op: "take", key: "j", val: "a"},
		}, 0},
		{"the zero value", []step{
			{op: "take", key: "k", val: "a"},
			{op: "forget", key: "k"},
			{op: "reset"},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o ownWrites[int]
			for i, s := range tc.steps {
				switch s.op {
				case "hold":
					o.hold(s.key, s.val, s.v)
				case "take":
					v, ok := o.take(s.key, []byte(s.val))
					if v != s.wantV || ok != s.wantOK {
						t.Errorf("step %d: take(%q, %q) = %d, %v; want %d, %v", i, s.key, s.val, v, ok, s.wantV, s.wantOK)
					}
				case "forget":
					o.forget(s.key)
				case "reset":
					o.reset()
				}
			}
			if got := o.len(); got != tc.held {
				t.Errorf("%d writes held, want %d", got, tc.held)
			}
		})
	}
}
