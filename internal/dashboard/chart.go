package dashboard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/meshflows/meshflows/api/v1"
)

// chart is a line chart drawn server-side as SVG: one path per line over a window of time,
// its y axis from 0 to the largest value (rounded up to a readable figure).
type chart struct {
	Width, Height int
	Lines         []chartLine
	// YMax labels the top of the y axis; From and To the ends of the x axis.
	YMax     string
	From, To time.Time
	// Empty: no line has a point in the window.
	Empty bool
	// Last is the first line's newest value ("—" without one).
	Last string
}

// chartLine is one series of a chart.
type chartLine struct {
	Name  string
	Class string // line-0, line-1, …: its colour
	Path  string // the SVG path's d
	Last  string // its newest value, formatted
	Dots  []chartDot
}

// chartDot is one point of a line, with what its tooltip says.
type chartDot struct {
	X, Y  string
	Title string
}

// chartPad is the room left for the axis labels, in pixels.
const chartPad = 4

// lineChart draws series over [from, to] in a width × height box.
func lineChart(series []apiv1.MetricSeries, from, to time.Time, width, height int) chart {
	c := chart{Width: width, Height: height, From: from.UTC(), To: to.UTC(), Empty: true, Last: "—"}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		return c
	}
	top := 0.0
	for _, s := range series {
		for _, p := range s.Points {
			if !p.Time.Before(from) && !p.Time.After(to) {
				top = max(top, p.Value)
			}
		}
	}
	top = niceCeil(top)
	c.YMax = formatValue(top)
	plotH := float64(height - 2*chartPad)
	for i, s := range series {
		l := chartLine{Name: s.Name, Class: "line-" + strconv.Itoa(i%6), Last: "—"}
		var b strings.Builder
		for _, p := range s.Points {
			if p.Time.Before(from) || p.Time.After(to) {
				continue
			}
			x := float64(width) * p.Time.Sub(from).Seconds() / span
			y := float64(chartPad) + plotH*(1-p.Value/top)
			xs, ys := strconv.FormatFloat(x, 'f', 1, 64), strconv.FormatFloat(y, 'f', 1, 64)
			if b.Len() == 0 {
				b.WriteString("M" + xs + " " + ys)
			} else {
				b.WriteString(" L" + xs + " " + ys)
			}
			l.Last = formatValue(p.Value)
			l.Dots = append(l.Dots, chartDot{X: xs, Y: ys, Title: fmt.Sprintf("%s %s: %s %s", p.Time.UTC().Format("15:04:05"), s.Name, formatValue(p.Value), s.Unit)})
			c.Empty = false
		}
		l.Path = b.String()
		if i == 0 {
			c.Last = l.Last
		}
		c.Lines = append(c.Lines, l)
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for 0 or less: an empty axis
// still has a scale).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// formatValue writes a value with the precision it needs: integers whole, small values to
// three significant figures.
func formatValue(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
