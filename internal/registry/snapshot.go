package registry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// SnapshotFile is the name WriteSnapshot gives the file in the snapshot dir.
const SnapshotFile = "meshflows-registry-snapshot.json"

// ErrNoSnapshotDir is returned by WriteSnapshot when no snapshot dir is configured.
var ErrNoSnapshotDir = errors.New("no snapshot dir configured")

// Snapshot is the content of a snapshot file.
type Snapshot struct {
	Timestamp     time.Time `json:"timestamp"`
	RegistryEpoch string    `json:"registry_epoch"`
	Revision      int64     `json:"revision"`
	// Generation is the last generation assigned; a restored store continues above it.
	Generation      int64            `json:"generation"`
	InstanceCount   int              `json:"instance_count"`
	CapabilityCount int              `json:"capability_count"`
	Instances       []apiv1.Instance `json:"instances"`
}

// Snapshot returns the current state as a Snapshot.
//
// Its revision is the one discovery answers carry (with the eligibility engine, the store's
// plus the verdicts'), so that a registry restored from it never answers a revision lower
// than one its consumers saw when it was written: they ignore an older revision of an epoch.
func (r *Registry) Snapshot() *Snapshot {
	rev := r.revision()
	recs := sortedRecords(r.store.Records())
	s := &Snapshot{
		Timestamp:     r.cfg.Now().UTC(),
		RegistryEpoch: r.store.Epoch().ID,
		Revision:      rev,
		Generation:    r.store.Generation(),
		InstanceCount: len(recs),
		Instances:     make([]apiv1.Instance, len(recs)),
	}
	for i, rec := range recs {
		s.Instances[i] = rec.Instance()
		s.CapabilityCount += len(rec.Capabilities)
	}
	return s
}

// WriteSnapshot writes the current state to SnapshotDir atomically (a temporary file
// renamed over the previous snapshot) and describes what it wrote.
func (r *Registry) WriteSnapshot(ctx context.Context) (*apiv1.SnapshotResponse, error) {
	if r.cfg.SnapshotDir == "" {
		return nil, ErrNoSnapshotDir
	}
	s := r.Snapshot()
	path := filepath.Join(r.cfg.SnapshotDir, SnapshotFile)
	if err := writeFileAtomic(path, s); err != nil {
		return nil, fmt.Errorf("write snapshot: %w", err)
	}
	r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "snapshot written", slog.String("path", path),
		slog.Int("instances", s.InstanceCount), slog.Int64("revision", s.Revision))
	return &apiv1.SnapshotResponse{Path: path, Timestamp: s.Timestamp, RegistryEpoch: s.RegistryEpoch,
		Revision: s.Revision, Instances: s.InstanceCount, Capabilities: s.CapabilityCount}, nil
}

func writeFileAtomic(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op after the rename
	w := bufio.NewWriterSize(f, 1<<20)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// RestoreSnapshot replaces the store's state with the snapshot in the file at path. Every
// restored lease gets a full TTL from now; the epoch, revision and generation counter carry
// on from the snapshot, so providers keep heartbeating the generations they hold. A file
// with any invalid instance is refused whole and changes nothing.
func (r *Registry) RestoreSnapshot(ctx context.Context, path string) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	defer f.Close()
	var s Snapshot
	if err := json.NewDecoder(bufio.NewReaderSize(f, 1<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", path, err)
	}
	if s.RegistryEpoch == "" {
		return nil, fmt.Errorf("restore snapshot %s: no registry_epoch", path)
	}
	now := r.cfg.Now()
	leaseEnd := now.Add(r.cfg.LeaseTTL)
	recs := make([]*Record, len(s.Instances))
	seen := make(map[string]bool, len(s.Instances))
	maxGen := s.Generation
	for i, in := range s.Instances {
		req := apiv1.RegisterRequest{InstanceID: in.InstanceID, ServiceName: in.ServiceName, ServiceVersion: in.ServiceVersion,
			Endpoint: in.Endpoint, Zone: in.Zone, Capabilities: in.Capabilities, Manifest: in.Manifest}
		if err := req.Validate(); err != nil {
			return nil, fmt.Errorf("restore snapshot %s: instances[%d]: %w", path, i, err)
		}
		if in.Generation < 1 || seen[in.InstanceID] {
			return nil, fmt.Errorf("restore snapshot %s: instances[%d]: duplicate instance or generation %d < 1", path, i, in.Generation)
		}
		seen[in.InstanceID] = true
		maxGen = max(maxGen, in.Generation)
		recs[i] = RecordFromInstance(in, leaseEnd)
	}
	ep := Epoch{ID: s.RegistryEpoch, Start: now, Empty: false}
	if err := r.store.Restore(ctx, ep, s.Revision, maxGen, recs); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", path, err)
	}
	r.reconcile.Store(true) // the eligibility monitor learns the restored fleet at the next sweep
	return &s, nil
}
