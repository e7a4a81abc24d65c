package dashboard

import (
	"net/http"
	"net/url"
	"strings"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// evacuationsData is the Evacuations page: every evacuation the registry lists, with its
// way back drawn as steps.
type evacuationsData struct {
	Evacuations []evacuationRow
}

type evacuationRow struct {
	apiv1.Evacuation
	Scope string
	Steps []returnStep // the way back, for one that ended or returns
}

// returnStep is one step of an evacuation's way back, as the page draws it.
type returnStep struct {
	Weight int
	State  string // done, current or next
}

func (d *Dashboard) evacuations(w http.ResponseWriter, r *http.Request) {
	list, err := d.registry.Evacuations(r.Context())
	var errs []string
	if err != nil {
		errs = append(errs, errString("registry evacuations (the dashboard's registry identity needs admin)", err)...)
		list = &apiv1.EvacuationList{}
	}
	data := &evacuationsData{}
	for _, ev := range list.Evacuations {
		row := evacuationRow{Evacuation: ev, Scope: "every capability"}
		if ev.CapabilityID != "" {
			row.Scope = ev.CapabilityID
		}
		if ret := ev.Return; ret != nil {
			for i, wgt := range append(append([]int{}, ret.Steps...), 100) {
				st := "next"
				switch {
				case i+1 < ret.Step:
					st = "done"
				case i+1 == ret.Step:
					st = "current"
				}
				row.Steps = append(row.Steps, returnStep{Weight: wgt, State: st})
			}
		}
		data.Evacuations = append(data.Evacuations, row)
	}
	d.render(w, r, "evacuations", "Evacuations", data, errs)
}

// evacuationAction cancels or extends an evacuation (a write action) and shows the page again.
func (d *Dashboard) evacuationAction(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var err error
	switch action := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]; action {
	case "cancel":
		_, err = d.registry.EndEvacuation(r.Context(), id)
	default: // extend
		dur := strings.TrimSpace(r.PostFormValue("duration"))
		if dur == "" {
			http.Error(w, "extend: say for how long (duration, like 2h)", http.StatusBadRequest)
			return
		}
		_, err = d.registry.ExtendEvacuation(r.Context(), id, dur)
	}
	if err != nil {
		http.Error(w, "evacuation "+id+": "+err.Error(), upstreamStatus(err))
		return
	}
	http.Redirect(w, r, "/evacuations#evacuation-"+url.PathEscape(id), http.StatusSeeOther)
}
