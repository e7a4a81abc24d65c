package registry

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/internal/apijson"
	"github.com/meshflows/meshflows/internal/statefile"
)

// SnapshotFile is the name older versions gave their one snapshot file in the snapshot dir;
// RestoreLatest still considers it.
const SnapshotFile = "meshflows-registry-snapshot.json"

// Snapshot files are named snapshotPrefix + the UTC time written + snapshotSuffix, so that
// their names sort in the order they were written.
const (
	snapshotPrefix     = "meshflows-registry-snapshot-"
	snapshotSuffix     = ".json"
	snapshotTimeLayout = "20060102T150405.000000000Z"
)

// DefaultSnapshotKeep is how many snapshot files WriteSnapshot keeps by default.
const DefaultSnapshotKeep = 5

// ErrNoSnapshotDir is returned by WriteSnapshot when no snapshot dir is configured.
var ErrNoSnapshotDir = errors.New("no snapshot dir configured")

// ErrWarmingUp is returned (as a *WarmingUpError) by WriteSnapshot while the registry's
// answers are incomplete: a snapshot then could lack live instances, and would become the
// newest one a restart restores.
var ErrWarmingUp = errors.New("the registry is warming up")

// WarmingUpError is ErrWarmingUp with the time left until the warm-up ends.
type WarmingUpError struct{ Left time.Duration }

func (e *WarmingUpError) Error() string {
	return fmt.Sprintf("%v for %s more: a snapshot now could lack live instances", ErrWarmingUp, e.Left.Round(time.Second))
}

// Is makes errors.Is(err, ErrWarmingUp) hold.
func (e *WarmingUpError) Is(target error) bool { return target == ErrWarmingUp }

// ErrNoSnapshot is returned by RestoreLatest when the snapshot dir holds no valid snapshot.
var ErrNoSnapshot = errors.New("no valid snapshot")

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
	// Operators holds the operator actions: evacuations and overrides, which a restored
	// registry applies again (nil when there were none).
	Operators *OperatorState `json:"operators,omitempty"`
}

// OperatorState is the operator actions a snapshot keeps.
type OperatorState struct {
	Evacuations []apiv1.Evacuation `json:"evacuations"`
	Overrides   []apiv1.Override   `json:"overrides"`
}

// Snapshot returns the current state as a Snapshot.
//
// Its revision is the one discovery answers carry (with the eligibility engine, the store's
// plus the verdicts'): a registry restored from it continues above it.
func (r *Registry) Snapshot() *Snapshot {
	s, recs := r.snapshotHeader()
	s.Instances = make([]apiv1.Instance, len(recs))
	for i, rec := range recs {
		s.Instances[i] = rec.Instance()
	}
	return s
}

// snapshotHeader returns the current state as a Snapshot without its instances, and the
// records they are made of, in the snapshot's order.
func (r *Registry) snapshotHeader() (*Snapshot, []*Record) {
	rev := r.revision()
	recs := sortedRecords(r.store.Records())
	s := &Snapshot{Timestamp: r.cfg.Now().UTC(), RegistryEpoch: r.store.Epoch().ID, Revision: rev,
		Generation: r.store.Generation(), InstanceCount: len(recs), Operators: r.operatorState()}
	for _, rec := range recs {
		s.CapabilityCount += len(rec.Capabilities)
	}
	return s, recs
}

// WriteSnapshot writes the current state to a new file in SnapshotDir atomically (a
// temporary file renamed into place), removes the oldest beyond SnapshotKeep and describes
// what it wrote. It refuses (ErrWarmingUp) while the registry is warming up: the newest
// snapshot is never one that may lack live instances.
func (r *Registry) WriteSnapshot(ctx context.Context) (*apiv1.SnapshotResponse, error) {
	if r.cfg.SnapshotDir == "" {
		return nil, ErrNoSnapshotDir
	}
	if st := r.State(); !st.Complete {
		return nil, &WarmingUpError{Left: r.store.Epoch().Start.Add(r.cfg.LeaseTTL).Sub(r.cfg.Now())}
	}
	// The file is written as it is made, one instance at a time: at a million instances it is
	// about 700 MB, which encoding/json would hold whole, and its copies of the records as
	// well, before writing a byte.
	s, recs := r.snapshotHeader()
	path := filepath.Join(r.cfg.SnapshotDir, snapshotPrefix+s.Timestamp.Format(snapshotTimeLayout)+snapshotSuffix)
	if err := statefile.Write(path, func(w io.Writer) error { return writeSnapshot(w, s, recs) }); err != nil {
		return nil, fmt.Errorf("write snapshot: %w", err)
	}
	r.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "snapshot written", slog.String("path", path),
		slog.Int("instances", s.InstanceCount), slog.Int64("revision", s.Revision))
	if err := r.pruneSnapshots(); err != nil {
		r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "removing old snapshots failed", slog.Any("error", err))
	}
	resp := &apiv1.SnapshotResponse{Path: path, Timestamp: s.Timestamp, RegistryEpoch: s.RegistryEpoch,
		Revision: s.Revision, Instances: s.InstanceCount, Capabilities: s.CapabilityCount}
	r.journalSnapshot(resp)
	return resp, nil
}

// writeSnapshot writes the snapshot whose header is s (its Instances left empty) and whose
// instances are recs' as JSON, as encoding/json writes a Snapshot but for HTML escaping
// (TestSnapshotFileIsTheSnapshot): one instance at a time, through apijson.
func writeSnapshot(w io.Writer, s *Snapshot, recs []*Record) error {
	b := make([]byte, 0, apijson.Chunk+4096)
	b = append(b, `{"timestamp":`...)
	b, err := apijson.Time(b, s.Timestamp)
	if err != nil {
		return err
	}
	b = append(b, `,"registry_epoch":`...)
	b = apijson.String(b, s.RegistryEpoch)
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, s.Revision, 10)
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, s.Generation, 10)
	b = append(b, `,"instance_count":`...)
	b = strconv.AppendInt(b, int64(s.InstanceCount), 10)
	b = append(b, `,"capability_count":`...)
	b = strconv.AppendInt(b, int64(s.CapabilityCount), 10)
	b = append(b, `,"instances":`...)
	b, err = apijson.List(b, slices.Values(recs), len(recs), func(b []byte, rec *Record) ([]byte, error) {
		in := rec.Instance()
		b, err := apijson.Instance(b, &in)
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", rec.InstanceID, err)
		}
		return b, nil
	}, func(piece []byte) ([]byte, error) {
		_, err := w.Write(piece)
		return piece[:0], err
	})
	if err != nil {
		return err
	}
	if s.Operators != nil {
		ops, err := json.Marshal(s.Operators)
		if err != nil {
			return err
		}
		b = append(append(b, `,"operators":`...), ops...)
	}
	_, err = w.Write(append(b, "}\n"...))
	return err
}

// snapshotFiles returns the snapshot files of dir, newest first: the timestamped ones by
// name, then the older single file.
func snapshotFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	legacy := false
	for _, e := range ents {
		n := e.Name()
		switch {
		case !e.Type().IsRegular():
		case n == SnapshotFile:
			legacy = true
		case strings.HasPrefix(n, snapshotPrefix) && strings.HasSuffix(n, snapshotSuffix):
			out = append(out, filepath.Join(dir, n))
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(b, a) })
	if legacy {
		out = append(out, filepath.Join(dir, SnapshotFile))
	}
	return out, nil
}

// pruneSnapshots removes the timestamped snapshots beyond the newest SnapshotKeep.
func (r *Registry) pruneSnapshots() error {
	files, err := snapshotFiles(r.cfg.SnapshotDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files[min(len(files), r.cfg.SnapshotKeep):] {
		if filepath.Base(f) == SnapshotFile {
			continue // an older version's file: left for its owner
		}
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RestoreLatest restores the newest valid snapshot in SnapshotDir and returns its path; a
// file that cannot be restored is skipped (and its error kept) for the next older one.
// ErrNoSnapshot when none can be: the caller starts empty.
func (r *Registry) RestoreLatest(ctx context.Context) (*Snapshot, string, error) {
	if r.cfg.SnapshotDir == "" {
		return nil, "", ErrNoSnapshotDir
	}
	files, err := snapshotFiles(r.cfg.SnapshotDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("restore: %w", err)
	}
	var skipped []error
	for _, f := range files {
		s, err := r.RestoreSnapshot(ctx, f)
		if err == nil {
			return s, f, nil
		}
		skipped = append(skipped, err)
	}
	if len(skipped) == 0 {
		return nil, "", fmt.Errorf("%w in %s: it holds none", ErrNoSnapshot, r.cfg.SnapshotDir)
	}
	return nil, "", fmt.Errorf("%w in %s: %w", ErrNoSnapshot, r.cfg.SnapshotDir, errors.Join(skipped...))
}

// RestoreSnapshot replaces the store's state with the snapshot in the file at path.
//
// A restore never rewinds what consumers saw: it begins a new epoch (a revision is never
// reused under one epoch with other content, so no pre-crash ETag matches), in warm-up
// (answers are incomplete for one lease TTL: the snapshot may lack instances registered after
// it). Each restored lease keeps the time it had left when the snapshot was written, and each
// restored instance is marked restored in discovery until its first heartbeat: an instance
// deregistered after the snapshot comes back only until its lease ends, and consumers that
// no longer knew it do not take it back. The revision and the generation counter carry on,
// so providers keep heartbeating the generations they hold. A file with any invalid instance
// is refused whole and changes nothing.
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
	if s.Timestamp.IsZero() {
		return nil, fmt.Errorf("restore snapshot %s: no timestamp", path)
	}
	now := r.cfg.Now()
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
		left := min(max(in.LeaseExpiresAt.Sub(s.Timestamp), 0), r.cfg.LeaseTTL)
		recs[i] = RecordFromInstance(in, now.Add(left))
		recs[i].MarkRestored()
	}
	id := now.UTC().Format(time.RFC3339Nano)
	if id == s.RegistryEpoch {
		id += "+restored" // a clock that has not moved since the snapshot: still a new epoch
	}
	ep := Epoch{ID: id, Start: now, WarmUp: true}
	if err := r.store.Restore(ctx, ep, s.Revision, maxGen, recs); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: %w", path, err)
	}
	r.reconcile.Store(true) // the eligibility monitor learns the restored fleet at the next sweep
	if err := r.restoreOperators(s.Operators, now); err != nil {
		return nil, fmt.Errorf("restore snapshot %s: operators: %w", path, err)
	}
	return &s, nil
}
