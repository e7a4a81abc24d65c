package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry/registrytest"
)

// TestTheAdminTokenFileIsReadAgain: the dashboard's admin token file is read again every
// interval; a new token is handed on (ending the sessions of the old one), an empty file is
// refused and the token in force stays.
func TestTheAdminTokenFileIsReadAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	os.WriteFile(path, []byte("one\n"), 0o600)
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watchTokenFile(ctx, path, "one", 10*time.Millisecond, func(tok string) { mu.Lock(); got = append(got, tok); mu.Unlock() }, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	seen := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
	os.WriteFile(path, []byte(""), 0o600) // empty: refused
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(path, []byte("two\n"), 0o600)
	registrytest.Until(t, "the new token handed on", func() bool { return len(seen()) > 0 })
	if s := seen(); len(s) != 1 || s[0] != "two" {
		t.Errorf("tokens handed on: %q, want only \"two\" (an empty file is refused)", s)
	}
}
