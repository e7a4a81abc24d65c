package server

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadAll(t *testing.T) {
	body := strings.Repeat("x", 700)
	errBroken := errors.New("connection reset")
	for _, tc := range []struct {
		name     string
		r        io.Reader
		declared int64
		want     string
		wantCap  int // 0: not checked
		err      error
	}{
		{"declared", strings.NewReader(body), 700, body, 701, nil},
		{"declared, one byte at a time", iotest.OneByteReader(strings.NewReader(body)), 700, body, 701, nil},
		{"longer than declared", strings.NewReader(body), 10, body, 0, nil},
		{"shorter than declared", strings.NewReader("abc"), 700, "abc", 701, nil},
		{"unknown length", strings.NewReader(body), -1, body, 0, nil},
		{"empty", strings.NewReader(""), 0, "", 0, nil},
		{"past presizeMax", strings.NewReader(body), presizeMax + 1, body, 0, nil},
		{"error", io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(errBroken)), 700, "abc", 0, errBroken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(tc.r, tc.declared)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if string(got) != tc.want {
				t.Errorf("read %d bytes, want %d", len(got), len(tc.want))
			}
			if tc.wantCap != 0 && cap(got) != tc.wantCap {
				t.Errorf("buffer of %d bytes, want %d", cap(got), tc.wantCap)
			}
		})
	}
}
