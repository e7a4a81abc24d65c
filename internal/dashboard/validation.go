package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// The validation console: a workflow's YAML with its diagnostics, re-validation, export,
// upload and publish.

// srcLine is one line of a workflow's YAML with its diagnostics.
type srcLine struct {
	N           int
	ID          string // its anchor: a diagnostic's breadcrumb links to it
	Text        string
	Severity    string // worst on the line: error, warning, info or ""
	Diagnostics []apiv1.Diagnostic
}

type wfView struct {
	Detail    apiv1.WorkflowDetail
	Published bool
	Lines     []srcLine
	Steps     []stepView
	// Diagnostics are every diagnostic of the workflow, each with its breadcrumb.
	Diagnostics []diagRow
}

// diagRow is one diagnostic with where it is: workflow → step → field, and the line it
// links to.
type diagRow struct {
	Workflow, Step, Layer string
	apiv1.Diagnostic
	Anchor string // the source line's id ("" when the diagnostic has no line)
}

// lineAnchor is the id of a line of a workflow's source on the page.
func lineAnchor(prefix string, line int) string {
	if line < 1 {
		return ""
	}
	return prefix + "-L" + strconv.Itoa(line)
}

// diagRows lists a validation's diagnostics, the workflow's own first, then each step's.
func diagRows(workflow, prefix string, r *apiv1.ValidationResult) []diagRow {
	if r == nil {
		return nil
	}
	var out []diagRow
	add := func(step, layer string, ds []apiv1.Diagnostic) {
		for _, dg := range ds {
			out = append(out, diagRow{Workflow: workflow, Step: step, Layer: layer, Diagnostic: dg, Anchor: lineAnchor(prefix, dg.Line)})
		}
	}
	add("", "workflow", r.Diagnostics)
	for _, st := range r.Steps {
		add(st.StepID, "contract", st.Contract.Diagnostics)
		add(st.StepID, "provider", st.Provider.Diagnostics)
	}
	return out
}

type stepView struct {
	apiv1.StepValidation
	Capability string
}

type validationData struct {
	Workflows    []wfView
	ByCapability map[string][]string // capability -> "workflow/step (status)"
	Uploaded     *apiv1.ValidationResult
	UploadLines  []srcLine
	UploadDiags  []diagRow
	View         string
	// Diagnostics is every diagnostic of every workflow (the Diagnostics tab).
	Diagnostics []diagRow
	// Published names the workflow just published from the page.
	Published string
}

// annotate splits src into lines, each with its diagnostics and its anchor (prefix-L<n>).
func annotate(src, prefix string, ds []apiv1.Diagnostic) []srcLine {
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	out := make([]srcLine, len(lines))
	rank := map[string]int{"": 0, "info": 1, "warning": 2, "error": 3}
	for i, l := range lines {
		out[i] = srcLine{N: i + 1, ID: lineAnchor(prefix, i+1), Text: l}
	}
	for _, dg := range ds {
		if dg.Line >= 1 && dg.Line <= len(out) {
			l := &out[dg.Line-1]
			l.Diagnostics = append(l.Diagnostics, dg)
			if rank[dg.Severity] > rank[l.Severity] {
				l.Severity = dg.Severity
			}
		}
	}
	return out
}

func allDiagnostics(r *apiv1.ValidationResult) []apiv1.Diagnostic {
	if r == nil {
		return nil
	}
	out := slices.Clone(r.Diagnostics)
	for _, s := range r.Steps {
		out = append(out, s.Contract.Diagnostics...)
		out = append(out, s.Provider.Diagnostics...)
	}
	return out
}

// stepCapabilities reads each step's capability id from the YAML the orchestrator holds.
func stepCapabilities(src string) map[string]string {
	out := map[string]string{}
	var cur string
	for _, l := range strings.Split(src, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "- id:") {
			cur = strings.Trim(strings.TrimSpace(strings.TrimPrefix(t, "- id:")), `"'`)
		} else if strings.HasPrefix(t, "id:") && cur != "" && out[cur] == "" {
			out[cur] = strings.Trim(strings.TrimSpace(strings.TrimPrefix(t, "id:")), `"'`)
		}
	}
	return out
}

func (d *Dashboard) validationData(ctx context.Context) (*validationData, error) {
	wl, err := d.orc.Workflows(ctx)
	if err != nil {
		return nil, err
	}
	data := &validationData{ByCapability: map[string][]string{}}
	for _, wf := range wl.Workflows {
		det, err := d.orc.Workflow(ctx, wf.Name)
		if err != nil {
			return nil, err
		}
		prefix := "src-" + det.Name
		v := wfView{Detail: *det, Published: wf.Published, Lines: annotate(det.YAML, prefix, allDiagnostics(det.Validation)), Diagnostics: diagRows(det.Name, prefix, det.Validation)}
		data.Diagnostics = append(data.Diagnostics, v.Diagnostics...)
		caps := stepCapabilities(det.YAML)
		if det.Validation != nil {
			for _, s := range det.Validation.Steps {
				v.Steps = append(v.Steps, stepView{StepValidation: s, Capability: caps[s.StepID]})
				data.ByCapability[caps[s.StepID]] = append(data.ByCapability[caps[s.StepID]],
					fmt.Sprintf("%s/%s (contract %s, provider %s)", det.Name, s.StepID, s.Contract.Status, s.Provider.Status))
			}
		}
		data.Workflows = append(data.Workflows, v)
	}
	return data, nil
}

func (d *Dashboard) validation(w http.ResponseWriter, r *http.Request) {
	data, err := d.validationData(r.Context())
	if data == nil {
		data = &validationData{}
	}
	data.View, data.Published = r.URL.Query().Get("view"), r.URL.Query().Get("published")
	d.render(w, r, "validation", "Validation", data, errString("orchestrator", err))
}

func (d *Dashboard) export(w http.ResponseWriter, r *http.Request) {
	res, err := d.orc.WorkflowValidation(r.Context(), r.PathValue("name"))
	if err != nil {
		http.Error(w, err.Error(), upstreamStatus(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="`+r.PathValue("name")+`-validation.json"`)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(res)
}

func (d *Dashboard) revalidate(w http.ResponseWriter, r *http.Request) {
	if _, err := d.orc.Revalidate(r.Context(), r.PathValue("name")); err != nil {
		http.Error(w, "re-validate: "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/validation#wf-"+r.PathValue("name"), http.StatusSeeOther)
}

// publish publishes a workflow from the validation console (a blocked one is refused by
// the orchestrator, which says why).
func (d *Dashboard) publish(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := d.orc.Publish(r.Context(), name); err != nil {
		http.Error(w, "publish: "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/validation?published="+url.QueryEscape(name)+"#wf-"+url.PathEscape(name), http.StatusSeeOther)
}

func (d *Dashboard) upload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	src := r.FormValue("yaml")
	if f, _, err := r.FormFile("file"); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
		f.Close()
		if len(b) > 0 {
			src = string(b)
		}
	}
	res, err := d.orc.UploadWorkflow(r.Context(), []byte(src))
	if ae := (*apiv1.Error)(nil); errors.As(err, &ae) && ae.Status == http.StatusUnprocessableEntity {
		err = nil // blocked by validation: the result shown says why
	}
	data, derr := d.validationData(r.Context())
	if data == nil {
		data = &validationData{}
	}
	data.Uploaded = res
	data.UploadLines = annotate(src, "src-uploaded", allDiagnostics(res))
	if res != nil {
		data.UploadDiags = diagRows(res.Workflow, "src-uploaded", res)
	}
	d.render(w, r, "validation", "Validation", data, append(errString("upload", err), errString("orchestrator", derr)...))
}
