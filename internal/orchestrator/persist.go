package orchestrator

// What the orchestrator keeps in Config.Dir: each workflow's revisions and state, its run
// history (an index and a file a run), and the discovery views its runs resolved with.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
	"github.com/meshflows/meshflows/discovery"
	"github.com/meshflows/meshflows/internal/statefile"
)

// discoveryViewFile keeps, in Dir, the discovery views the runs resolved with (a dot file:
// never taken for a workflow's state).
const discoveryViewFile = ".discovery-view.json"

// saveDiscovery writes the discovery views to Dir, so that an orchestrator restarted while
// the registry is away resolves its steps as before (Load restores them).
func (o *Orchestrator) saveDiscovery() {
	if o.cfg.Dir == "" {
		return
	}
	if err := statefile.WriteJSON(filepath.Join(o.cfg.Dir, discoveryViewFile), o.cfg.Discovery.Save()); err != nil {
		o.cfg.Logger.Warn("saving the discovery view failed", slog.String("dir", o.cfg.Dir), slog.Any("error", err))
	}
}

// restoreDiscovery seeds the discovery views from Dir (before the workflows are validated).
func (o *Orchestrator) restoreDiscovery() error {
	raw, err := os.ReadFile(filepath.Join(o.cfg.Dir, discoveryViewFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved discovery.Saved
	if err := json.Unmarshal(raw, &saved); err != nil {
		return fmt.Errorf("%s: %w", discoveryViewFile, err)
	}
	if n := o.cfg.Discovery.Restore(saved); n > 0 {
		o.cfg.Logger.Info("discovery views restored until the registry answers", slog.Int("queries", n), slog.Time("saved_at", saved.SavedAt))
	}
	return nil
}

// persisted is a workflow's state file (NAME.json). NAME.yaml holds the latest revision;
// NAME.published.yaml the published one when it is an older revision.
type persisted struct {
	Published         bool                    `json:"published"`
	Revision          int                     `json:"revision"`
	PublishedRevision int                     `json:"published_revision,omitempty"`
	Validation        *apiv1.ValidationResult `json:"validation"`
}

// publishedSuffix names the file of a published revision older than the latest.
const publishedSuffix = ".published.yaml"

// runsSuffix names the file of a workflow's history index (its run ids, trigger slices and
// next scheduled fire); runsDirSuffix the directory of its runs, one file each, written once
// when the run ends and removed when it leaves the history.
const (
	runsSuffix    = ".runs.json"
	runsDirSuffix = ".runs"
)

// persistedRuns is a workflow's history index (NAME.runs.json). Runs is the whole history
// of the files before the runs had a file each: it is read, and written no more.
type persistedRuns struct {
	RunIDs []string     `json:"run_ids"`
	Runs   []*apiv1.Run `json:"runs,omitempty"`
	Slices []runSlice   `json:"slices"`
	// NextFire is the schedule's next fire: after a restart the fires missed meanwhile are
	// recorded as missed.
	NextFire time.Time `json:"next_fire,omitzero"`
}

// persistRuns writes what changed in a workflow's history to Dir — the run that ended (hw,
// possibly empty), the removal of those that left, and the small index — so that it
// survives a restart; a failure is logged (the run happened all the same).
func (o *Orchestrator) persistRuns(name string, hw historyWrite) {
	if o.cfg.Dir == "" {
		return
	}
	o.mu.Lock()
	e := o.workflows[name]
	if e == nil {
		o.mu.Unlock()
		return
	}
	pr := persistedRuns{RunIDs: make([]string, len(e.runs)), Slices: e.stats.kept(), NextFire: e.nextRun}
	for i, r := range e.runs {
		pr.RunIDs[i] = r.RunID
	}
	o.mu.Unlock()
	dir := filepath.Join(o.cfg.Dir, name+runsDirSuffix)
	var errs []error
	if hw.data != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			errs = append(errs, err)
		} else if err := statefile.Write(filepath.Join(dir, hw.runID+".json"), func(w io.Writer) error {
			_, err := w.Write(hw.data)
			return err
		}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range hw.dropped {
		if err := os.Remove(filepath.Join(dir, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := statefile.WriteJSON(filepath.Join(o.cfg.Dir, name+runsSuffix), pr); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		o.cfg.Logger.Warn("saving the run history failed", slog.String("workflow", name), slog.Any("error", err))
	}
}

// restoreRuns reads a workflow's run history back from Dir: the index, then each run's
// file (a missing or unreadable one is left out). A history of the older single-file form
// is read whole and written in the new form.
func (o *Orchestrator) restoreRuns(name string) error {
	data, err := os.ReadFile(filepath.Join(o.cfg.Dir, name+runsSuffix))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var pr persistedRuns
	if err := json.Unmarshal(data, &pr); err != nil {
		return fmt.Errorf("%s: %w", name+runsSuffix, err)
	}
	dir := filepath.Join(o.cfg.Dir, name+runsDirSuffix)
	old := pr.Runs != nil
	runs := slices.DeleteFunc(pr.Runs, func(r *apiv1.Run) bool { return r == nil || !runIDRe.MatchString(r.RunID) })
	var errs []error
	for _, id := range pr.RunIDs {
		if !runIDRe.MatchString(id) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, id+".json"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r apiv1.Run
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(name+runsDirSuffix, id+".json"), err))
			continue
		}
		runs = append(runs, &r)
	}
	o.mu.Lock()
	e := o.workflows[name]
	if e == nil {
		o.mu.Unlock()
		return nil
	}
	e.runs, e.sizes, e.histBytes = nil, nil, 0
	var writes []historyWrite
	for _, r := range runs {
		hw := o.record(e, r)
		if old {
			writes = append(writes, hw)
		}
	}
	e.stats.restore(pr.Slices)
	e.nextRun = pr.NextFire
	o.mu.Unlock()
	for _, hw := range writes { // the older form, once: a file a run
		o.persistRuns(name, hw)
	}
	if len(writes) == 0 {
		o.persistRuns(name, historyWrite{}) // drop the ids of runs that could not be read
	}
	return errors.Join(errs...)
}

// runIDRe is the form of the run ids the orchestrator makes (newRunID); a restored id of
// another form names no file.
var runIDRe = regexp.MustCompile(`^run-[0-9a-f]{16}$`)

func (o *Orchestrator) persist(name string) error {
	if o.cfg.Dir == "" {
		return nil
	}
	o.mu.Lock()
	e := o.workflows[name]
	if e == nil { // deleted meanwhile
		o.mu.Unlock()
		return nil
	}
	src, st := e.latest.src, persisted{Published: e.published != nil, Revision: e.latest.number, Validation: e.latest.result}
	var older []byte
	if e.published != nil {
		st.PublishedRevision = e.published.number
		if e.published != e.latest {
			older = e.published.src
		}
	}
	o.mu.Unlock()
	if err := os.MkdirAll(o.cfg.Dir, 0o755); err != nil {
		return err
	}
	state, _ := json.MarshalIndent(st, "", "  ")
	writes := []struct {
		file string
		data []byte
	}{{name + ".yaml", src}, {name + ".json", state}}
	if older != nil {
		writes = append(writes, struct {
			file string
			data []byte
		}{name + publishedSuffix, older})
	} else if err := os.Remove(filepath.Join(o.cfg.Dir, name+publishedSuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("persist workflow: %w", err)
	}
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(o.cfg.Dir, w.file), w.data, 0o644); err != nil {
			return fmt.Errorf("persist workflow: %w", err)
		}
	}
	return nil
}

// renumber gives a reloaded workflow's latest revision the number it had.
func (o *Orchestrator) renumber(name string, n int) {
	if n <= 0 {
		return
	}
	o.mu.Lock()
	if e := o.workflows[name]; e != nil {
		e.latest.number = n
	}
	o.mu.Unlock()
}

// Load restores the discovery views saved in Dir (resolutions work while the registry is
// away), then reads the workflows of Dir, re-validates each and restores its published state
// unless validation now blocks it. It reports the files it could not load.
func (o *Orchestrator) Load(ctx context.Context) error {
	if o.cfg.Dir == "" {
		return nil
	}
	var errs []error
	if err := o.restoreDiscovery(); err != nil {
		errs = append(errs, err) // the workflows load all the same
	}
	files, _ := filepath.Glob(filepath.Join(o.cfg.Dir, "*.yaml"))
	for _, f := range files {
		if strings.HasSuffix(f, publishedSuffix) {
			continue // loaded with its workflow
		}
		if err := o.load(ctx, f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// load restores one workflow from its files: the published revision (an older one first,
// when there is one), then the latest, with their revision numbers.
func (o *Orchestrator) load(ctx context.Context, f string) error {
	src, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	base := strings.TrimSuffix(f, ".yaml")
	var st persisted // read before Upload rewrites it
	if data, err := os.ReadFile(base + ".json"); err == nil {
		json.Unmarshal(data, &st)
	}
	older, olderErr := os.ReadFile(base + publishedSuffix)
	if st.Published && olderErr == nil {
		res, err := o.Upload(ctx, older)
		if err != nil {
			return fmt.Errorf("%s: published revision: %w", base+publishedSuffix, err)
		}
		o.renumber(res.Workflow, st.PublishedRevision)
		if _, err := o.Publish(res.Workflow); err != nil {
			return fmt.Errorf("%s: publish: %w", base+publishedSuffix, err)
		}
	}
	res, err := o.Upload(ctx, src)
	if err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	o.renumber(res.Workflow, st.Revision)
	if st.Published && olderErr != nil {
		if _, err := o.Publish(res.Workflow); err != nil {
			return fmt.Errorf("%s: publish: %w", f, err)
		}
	}
	return o.restoreRuns(res.Workflow)
}
