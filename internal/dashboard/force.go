package dashboard

import "math"

// forceIterations is how many steps the route map's force layout takes: enough for 50 routes
// and their instances (some 200 nodes) to settle, a few milliseconds of the server's time.
const forceIterations = 300

// point is a node's centre.
type point struct{ X, Y float64 }

// forceLayout moves the nodes from their start positions to where their links pull them and
// every other node pushes them (Fruchterman and Reingold's spring embedder, with a cooling
// step): linked nodes end near one another, unrelated ones apart. It is deterministic —
// the same map gives the same picture — and sizes repulsion by the nodes' half-widths, so
// that labels do not overlap; a pull to the centre keeps unlinked groups near. edges are
// pairs of node indices.
func forceLayout(start []point, halfW []float64, edges [][2]int) []point {
	n := len(start)
	pos := append([]point(nil), start...)
	if n < 2 {
		return pos
	}
	const k = 90.0 // the ideal distance between two linked nodes, in pixels
	var cx, cy float64
	for _, p := range start {
		cx, cy = cx+p.X/float64(n), cy+p.Y/float64(n)
	}
	temp := k * 4
	disp := make([]point, n)
	for range forceIterations {
		clear(disp)
		for i := range n {
			for j := i + 1; j < n; j++ {
				dx, dy := pos[i].X-pos[j].X, pos[i].Y-pos[j].Y
				d := math.Hypot(dx, dy)
				if d < 0.01 { // on top of one another: push apart along a fixed direction
					dx, dy, d = float64(i-j), 1, math.Hypot(float64(i-j), 1)
				}
				// boxes: their half-widths count as distance already taken
				gap := max(d-(halfW[i]+halfW[j])*0.5, 1)
				f := k * k / gap
				fx, fy := dx/d*f, dy/d*f
				disp[i].X, disp[i].Y = disp[i].X+fx, disp[i].Y+fy
				disp[j].X, disp[j].Y = disp[j].X-fx, disp[j].Y-fy
			}
		}
		for _, e := range edges {
			a, b := e[0], e[1]
			dx, dy := pos[a].X-pos[b].X, pos[a].Y-pos[b].Y
			d := math.Max(math.Hypot(dx, dy), 0.01)
			f := d * d / k
			fx, fy := dx/d*f, dy/d*f
			disp[a].X, disp[a].Y = disp[a].X-fx, disp[a].Y-fy
			disp[b].X, disp[b].Y = disp[b].X+fx, disp[b].Y+fy
		}
		for i := range n { // gravity: what nothing links (another service's routes) stays in sight
			disp[i].X -= (pos[i].X - cx) * 0.2
			disp[i].Y -= (pos[i].Y - cy) * 0.2
		}
		for i := range n {
			d := math.Hypot(disp[i].X, disp[i].Y)
			if d > 0 {
				step := math.Min(d, temp)
				pos[i].X += disp[i].X / d * step
				pos[i].Y += disp[i].Y / d * step
			}
		}
		temp = math.Max(temp*0.985, k*0.01)
	}
	return pos
}
