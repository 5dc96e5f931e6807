package efficacy

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// armColors are the lines' colours, in arm order (ArmColor).
var armColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}}

// ArmColor is the colour of the line of arm i (in arm order), the same in every plot.
func ArmColor(i int) color.RGBA { return armColors[i%len(armColors)] }

// PlotPNG draws held-out success against rollouts consumed: per arm the mean over seeds
// (a line with points) and the range over seeds (a light band), the threshold as a
// dashed line, and a legend. Curves of one arm must share their eval points' rollout
// counts.
func PlotPNG(w io.Writer, curves []Curve, threshold float64, title string) error {
	return plotPNG(w, curves, threshold, title, "rollouts consumed")
}

// PlotCPUPNG draws held-out success against training CPU-seconds: each eval of an
// arm at the mean CPU-seconds its seeds had used by then.
func PlotCPUPNG(w io.Writer, curves []Curve, threshold float64, title string) error {
	byArm := map[string][]float64{}
	n := map[string]int{}
	for _, c := range curves {
		sum := byArm[c.Arm]
		for i, p := range c.Points {
			if i >= len(sum) {
				sum = append(sum, 0)
			}
			sum[i] += p.CPUSeconds
		}
		byArm[c.Arm] = sum
		n[c.Arm]++
	}
	out := make([]Curve, len(curves))
	for k, c := range curves {
		out[k] = Curve{Arm: c.Arm, Seed: c.Seed, LR: c.LR}
		for i, p := range c.Points {
			out[k].Points = append(out[k].Points, Point{Rollouts: int(math.Round(byArm[c.Arm][i] / float64(n[c.Arm]))), Success: p.Success})
		}
	}
	return plotPNG(w, out, threshold, title, "training CPU-seconds (mean over seeds)")
}

// armBand is one arm's curve over seeds: at each eval x (rollouts or CPU-seconds) the
// mean, minimum and maximum success.
type armBand struct {
	arm             string
	seeds           int
	x, lo, mean, hi []float64
}

func bands(curves []Curve) []armBand {
	var out []armBand
	index := map[string]int{}
	at := map[string]map[int][]float64{}
	for _, c := range curves {
		i, ok := index[c.Arm]
		if !ok {
			i = len(out)
			index[c.Arm] = i
			out = append(out, armBand{arm: c.Arm})
			at[c.Arm] = map[int][]float64{}
		}
		out[i].seeds++
		for _, p := range c.Points {
			at[c.Arm][p.Rollouts] = append(at[c.Arm][p.Rollouts], p.Success)
		}
	}
	for i := range out {
		var xs []int
		for x := range at[out[i].arm] {
			xs = append(xs, x)
		}
		sort.Ints(xs)
		for _, x := range xs {
			s := NewStats(at[out[i].arm][x])
			out[i].x = append(out[i].x, float64(x))
			out[i].lo = append(out[i].lo, s.Min)
			out[i].mean = append(out[i].mean, s.Mean)
			out[i].hi = append(out[i].hi, s.Max)
		}
	}
	return out
}

func plotPNG(w io.Writer, curves []Curve, threshold float64, title, xlabel string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "held-out success"
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = PercentTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(8)
	p.Legend.YOffs = -vg.Points(8)
	maxX := 1.0
	for ai, b := range bands(curves) {
		col := armColors[ai%len(armColors)]
		light := color.NRGBA{col.R, col.G, col.B, 60}
		if len(b.x) > 1 { // the range over seeds: the polygon lo → hi
			var pts plotter.XYs
			for i := range b.x {
				pts = append(pts, plotter.XY{X: b.x[i], Y: b.lo[i]})
			}
			for i := len(b.x) - 1; i >= 0; i-- {
				pts = append(pts, plotter.XY{X: b.x[i], Y: b.hi[i]})
			}
			poly, err := plotter.NewPolygon(pts)
			if err != nil {
				return fmt.Errorf("plot band %s: %w", b.arm, err)
			}
			poly.Color = light
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		mean := make(plotter.XYs, len(b.x))
		for i := range b.x {
			mean[i] = plotter.XY{X: b.x[i], Y: b.mean[i]}
			maxX = math.Max(maxX, b.x[i])
		}
		line, points, err := plotter.NewLinePoints(mean)
		if err != nil {
			return fmt.Errorf("plot mean %s: %w", b.arm, err)
		}
		line.Color, line.Width = col, vg.Points(2)
		points.Color, points.Shape = col, draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(fmt.Sprintf("%s (%d seeds)", b.arm, b.seeds), line, points)
	}
	p.X.Min, p.X.Max = 0, maxX
	if !math.IsNaN(threshold) && !math.IsInf(threshold, 0) { // NaN: no threshold (no ratio)
		thr, err := plotter.NewLine(plotter.XYs{{X: 0, Y: threshold}, {X: maxX, Y: threshold}})
		if err != nil {
			return fmt.Errorf("plot threshold: %w", err)
		}
		thr.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(thr)
		p.Legend.Add("threshold", thr)
	}
	c := vgimg.PngCanvas{Canvas: vgimg.New(9*vg.Inch, 5.8*vg.Inch)}
	p.Draw(draw.New(c))
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("write png: %w", err)
	}
	return nil
}

// PercentTicks labels a 0…1 axis every 10% as percent.
type PercentTicks struct{}

func (PercentTicks) Ticks(min, max float64) []plot.Tick {
	var ts []plot.Tick
	for i := 0; i <= 20; i++ {
		v := float64(i) / 20
		if v < min-1e-9 || v > max+1e-9 {
			continue
		}
		t := plot.Tick{Value: v}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%d%%", i*5)
		}
		ts = append(ts, t)
	}
	return ts
}
