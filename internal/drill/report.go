package drill

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report as the table of docs/failure-classes.md: per class its bound,
// the measured figure over its trials (min / median / max), the failed requests per trial,
// the alarm and the verdict.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tbound\tmeasured\tfailed req.\talarm\tverdict")
	for _, row := range r.Rows {
		alarm := "—"
		if row.Alarm != "" {
			alarm = fmt.Sprintf("%s %.0f s", row.Alarm, row.AlarmSeconds)
		}
		verdict := row.Verdict
		if row.Why != "" {
			verdict += ": " + row.Why
		}
		fmt.Fprintf(tw, "%d %s\t%s\t%s\t%s\t%s\t%s\n", row.Class, row.Name, row.Bound, row.measured(), row.failedPerTrial(), alarm, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if row.Missing != "" && row.Verdict != "ok" {
			fmt.Fprintf(w, "class %d waits for a mechanism that does not exist yet: %s\n", row.Class, row.Missing)
		}
	}
	if !r.Prometheus {
		fmt.Fprintln(w, "no Prometheus installed: alarms not watched")
	}
	_, err := fmt.Fprintf(w, "%.0f s in all (store %s, lease TTL %s, %d req/s per gateway)\n", r.Seconds, r.Store, r.LeaseTTL, r.Rate)
	return err
}

// measured is min / median / max of the trials' figures ("≤ bound in n/n" is the verdict's).
func (row Row) measured() string {
	if len(row.Trials) == 0 {
		return "—"
	}
	v := make([]float64, 0, len(row.Trials))
	for _, t := range row.Trials {
		v = append(v, t.Measured)
	}
	slices.Sort(v)
	unit := row.Trials[0].Unit
	trials := fmt.Sprintf(" (%d trials)", len(v))
	if len(v) == 1 {
		return fmt.Sprintf("%s %s%s", num(v[0]), unit, strings.Replace(trials, "trials", "trial", 1))
	}
	return fmt.Sprintf("%s / %s / %s %s%s", num(v[0]), num(v[len(v)/2]), num(v[len(v)-1]), unit, trials)
}

func (row Row) failedPerTrial() string {
	if len(row.Trials) == 0 {
		return "—"
	}
	failed, sent := 0, 0
	for _, t := range row.Trials {
		failed += t.Failed
		sent += t.Sent
	}
	if sent == 0 {
		return "—"
	}
	return fmt.Sprintf("%s /trial", num(float64(failed)/float64(len(row.Trials))))
}

func num(f float64) string {
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%.2f", f)
}
