package protocol3

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotCopyCurve draws a protocol-3 warm start's validation curve against steps (attempt
// 5's copy tracking): on top the deciding-token margin gain (nats) with the threshold
// G2 holds it to (G2MinMargin) dashed; below greedy success, the next call right after
// a hinted slip, G3's band (30–45%) and G1's 60% dashed. kept marks the kept step.
func PlotCopyCurve(w io.Writer, vals []ValPoint, kept int, title string) error {
	if len(vals) == 0 {
		return fmt.Errorf("plot copy curve: no evals")
	}
	maxX := float64(vals[len(vals)-1].Step)
	line := func(p *plot.Plot, name string, col color.RGBA, y func(ValPoint) float64) error {
		var xy plotter.XYs // a rate of no events (NaN) is left out
		for _, v := range vals {
			if !math.IsNaN(y(v)) {
				xy = append(xy, plotter.XY{X: float64(v.Step), Y: y(v)})
			}
		}
		if len(xy) == 0 {
			return nil
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plot copy curve %s: %w", name, err)
		}
		l.Color, l.Width = col, vg.Points(2)
		pts.Color, pts.Shape = col, draw.CircleGlyph{}
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
		return nil
	}
	dashed := func(p *plot.Plot, name string, y float64) error {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: maxX, Y: y}})
		if err != nil {
			return fmt.Errorf("plot copy curve %s: %w", name, err)
		}
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		if name != "" {
			p.Legend.Add(name, l)
		}
		return nil
	}
	top := plot.New()
	top.Title.Text = title
	top.X.Label.Text = "step"
	top.Y.Label.Text = "deciding-token margin gain (nats)"
	top.Add(plotter.NewGrid())
	top.Legend.Top, top.Legend.Left = false, false
	top.Legend.XOffs, top.Legend.YOffs = -vg.Points(8), vg.Points(8)
	hi := G2MinMargin
	for _, v := range vals {
		hi = max(hi, v.Margin)
	}
	top.Y.Min, top.Y.Max = min(0, vals[0].Margin), 1.15*hi
	top.Y.Min = min(top.Y.Min, minMargin(vals))
	if err := line(top, "margin gain, validation", efficacy.ArmColor(0), func(v ValPoint) float64 { return v.Margin }); err != nil {
		return err
	}
	if err := dashed(top, fmt.Sprintf("G2 threshold (+%g)", G2MinMargin), G2MinMargin); err != nil {
		return err
	}
	bottom := plot.New()
	bottom.X.Label.Text = "step"
	bottom.Y.Label.Text = "validation"
	bottom.Y.Min, bottom.Y.Max = 0, 1
	bottom.Y.Tick.Marker = efficacy.PercentTicks{}
	bottom.Add(plotter.NewGrid())
	bottom.Legend.Top, bottom.Legend.Left = true, true
	if err := line(bottom, "greedy success", efficacy.ArmColor(1), func(v ValPoint) float64 { return v.Success }); err != nil {
		return err
	}
	if err := line(bottom, "next call right after a hinted slip", efficacy.ArmColor(2), func(v ValPoint) float64 { return v.HintRight }); err != nil {
		return err
	}
	// Attempt 10 on: the held-out-mix success and live sibling, when the evals hold them.
	if slices.ContainsFunc(vals, func(v ValPoint) bool { return v.SiblingSlips > 0 }) {
		if err := line(bottom, "greedy success, held-out family mix", efficacy.ArmColor(3), func(v ValPoint) float64 { return v.MixSuccess }); err != nil {
			return err
		}
		if err := line(bottom, "next call right after a sibling", efficacy.ArmColor(4), func(v ValPoint) float64 { return v.SiblingRight }); err != nil {
			return err
		}
	}
	for _, y := range []float64{0.30, 0.45} {
		if err := dashed(bottom, "", y); err != nil {
			return err
		}
	}
	if err := dashed(bottom, "G3 band 30–45%, G1 60%", 0.60); err != nil {
		return err
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Min, p.X.Max = 0, maxX
		k, err := plotter.NewLine(plotter.XYs{{X: float64(kept), Y: p.Y.Min}, {X: float64(kept), Y: p.Y.Max}})
		if err != nil {
			return fmt.Errorf("plot copy curve: %w", err)
		}
		k.Color = color.RGBA{128, 128, 128, 255}
		p.Add(k)
	}
	top.Legend.Add(fmt.Sprintf("kept (step %d)", kept))
	const rows = 2
	c := vgimg.PngCanvas{Canvas: vgimg.New(9*vg.Inch, 9*vg.Inch)}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: rows, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("write png: %w", err)
	}
	return nil
}

func minMargin(vals []ValPoint) float64 {
	m := 0.0
	for _, v := range vals {
		m = min(m, v.Margin)
	}
	return m
}
