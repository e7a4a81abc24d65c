package memstore_test

import (
	"testing"
	"time"

	"github.com/meshflows/meshflows/internal/registry"
	"github.com/meshflows/meshflows/internal/store/memstore"
	"github.com/meshflows/meshflows/internal/store/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) registry.Store { return memstore.New(now) }, storetest.Options{})
}

func TestNewStoreStartsAnEmptyEpoch(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	s := memstore.New(func() time.Time { return at })
	ep := s.Epoch()
	if !ep.WarmUp || !ep.Start.Equal(at) || ep.ID != "2026-01-02T03:04:05.000000006Z" {
		t.Errorf("Epoch() = %+v, want an empty epoch starting at %v", ep, at)
	}
	if s2 := memstore.New(func() time.Time { return at.Add(time.Nanosecond) }); s2.Epoch().ID == ep.ID {
		t.Errorf("two stores started apart share the epoch %q", ep.ID)
	}
}
