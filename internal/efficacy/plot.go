package efficacy

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"sort"
)

// armColors are the lines' colours, in arm order.
var armColors = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}}

// PlotPNG draws held-out success against rollouts consumed: per arm the mean over seeds
// (a line) and the range over seeds (a light band), the threshold as a dashed line,
// and a legend. Curves of one arm must share their eval points' rollout counts.
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

func plotPNG(w io.Writer, curves []Curve, threshold float64, title, xlabel string) error {
	const W, H, left, right, top, bottom = 900, 580, 80, 200, 70, 60
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	type band struct{ x, lo, mean, hi []float64 }
	var arms []string
	byArm := map[string][]Curve{}
	maxX := 1.0
	for _, c := range curves {
		if _, ok := byArm[c.Arm]; !ok {
			arms = append(arms, c.Arm)
		}
		byArm[c.Arm] = append(byArm[c.Arm], c)
		for _, p := range c.Points {
			maxX = math.Max(maxX, float64(p.Rollouts))
		}
	}
	minY, maxY := 0.0, 1.0
	px := func(x float64) int { return left + int(x/maxX*float64(W-left-right)) }
	py := func(y float64) int { return H - bottom - int((y-minY)/(maxY-minY)*float64(H-top-bottom)) }
	grey, black := color.RGBA{200, 200, 200, 255}, color.RGBA{0, 0, 0, 255}
	// Axes, grid and ticks.
	for i := 0; i <= 10; i++ {
		y := minY + float64(i)/10*(maxY-minY)
		hline(img, left, W-right, py(y), grey, 1)
		lbl := fmt.Sprintf("%d%%", int(math.Round(100*y)))
		drawText(img, left-8-textWidth(lbl, 1), py(y)-3, lbl, black, 1)
	}
	for i := 0; i <= 5; i++ {
		x := float64(i) / 5 * maxX
		vline(img, px(x), top, H-bottom, grey)
		lbl := fmt.Sprintf("%d", int(math.Round(x)))
		drawText(img, px(x)-textWidth(lbl, 1)/2, H-bottom+8, lbl, black, 1)
	}
	hline(img, left, W-right, H-bottom, black, 1)
	vline(img, left, top, H-bottom, black)
	drawText(img, left+(W-left-right)/2-textWidth(xlabel, 2)/2, H-bottom+28, xlabel, black, 2)
	drawText(img, 8, top-26, "held-out success", black, 2)
	drawText(img, left+(W-left-right)/2-textWidth(title, 2)/2, 10, title, black, 2)
	// Threshold, dashed.
	for x := left; x < W-right; x += 12 {
		hline(img, x, min(x+6, W-right), py(threshold), black, 1)
	}
	for ai, a := range arms {
		col := armColors[ai%len(armColors)]
		light := color.RGBA{col.R/4 + 191, col.G/4 + 191, col.B/4 + 191, 255}
		cs := byArm[a]
		// Group by eval index (rollouts), over seeds.
		at := map[int][]float64{}
		for _, c := range cs {
			for _, p := range c.Points {
				at[p.Rollouts] = append(at[p.Rollouts], p.Success)
			}
		}
		var b band
		xs := make([]int, 0, len(at))
		for x := range at {
			xs = append(xs, x)
		}
		sort.Ints(xs)
		for _, x := range xs {
			s := NewStats(at[x])
			b.x, b.lo, b.mean, b.hi = append(b.x, float64(x)), append(b.lo, s.Min), append(b.mean, s.Mean), append(b.hi, s.Max)
		}
		for i := 1; i < len(b.x); i++ { // band: vertical spans between consecutive evals
			for X := px(b.x[i-1]); X <= px(b.x[i]); X++ {
				f := float64(X-px(b.x[i-1])) / math.Max(1, float64(px(b.x[i])-px(b.x[i-1])))
				lo := b.lo[i-1] + f*(b.lo[i]-b.lo[i-1])
				hi := b.hi[i-1] + f*(b.hi[i]-b.hi[i-1])
				for Y := py(hi); Y <= py(lo); Y++ {
					if img.RGBAAt(X, Y) == (color.RGBA{255, 255, 255, 255}) || img.RGBAAt(X, Y) == grey {
						img.SetRGBA(X, Y, light)
					}
				}
			}
		}
		for i := 1; i < len(b.x); i++ {
			line(img, px(b.x[i-1]), py(b.mean[i-1]), px(b.x[i]), py(b.mean[i]), col)
		}
		ly := top + 10 + 24*ai
		hline(img, W-right+15, W-right+45, ly+3, col, 3)
		drawText(img, W-right+52, ly, fmt.Sprintf("%s (%d)", a, len(cs)), black, 1)
	}
	ly := top + 10 + 24*len(arms)
	for x := W - right + 15; x < W-right+45; x += 8 {
		hline(img, x, x+4, ly+3, black, 1)
	}
	drawText(img, W-right+52, ly, "threshold", black, 1)
	return png.Encode(w, img)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color, thick int) {
	for t := range thick {
		for x := x0; x <= x1; x++ {
			img.Set(x, y+t-thick/2, c)
		}
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// line draws a 2-pixel-wide segment (Bresenham, doubled).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0, y0+1, c)
		img.Set(x0+1, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
