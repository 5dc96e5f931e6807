package efficacy

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlotPNG(t *testing.T) {
	curves := []Curve{
		{Arm: "outcome-only", Seed: 1, Points: pts(0.2, 0.25, 0.3, 0.4)},
		{Arm: "outcome-only", Seed: 2, Points: pts(0.2, 0.2, 0.3, 0.35)},
		{Arm: "hint", Seed: 1, Points: pts(0.2, 0.4, 0.5, 0.6)},
		{Arm: "hint", Seed: 2, Points: pts(0.2, 0.3, 0.5, 0.5)},
	}
	for name, draw := range map[string]func(*bytes.Buffer) error{
		"rollouts": func(b *bytes.Buffer) error { return PlotPNG(b, curves, 0.3, "Efficacy (test)") },
		"cpu":      func(b *bytes.Buffer) error { return PlotCPUPNG(b, curves, 0.3, "Efficacy (test, CPU)") },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, draw(&buf))
			img, err := png.Decode(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			require.Equal(t, 864, img.Bounds().Dx()) // 9 in at 96 dpi
			// Each arm's colour is on the image (its mean line and legend).
			found := map[[3]uint32]bool{}
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					r, g, bl, _ := img.At(x, y).RGBA()
					found[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
				}
			}
			for _, c := range armColors[:2] {
				require.True(t, found[[3]uint32{uint32(c.R), uint32(c.G), uint32(c.B)}], "colour %v", c)
			}
			if out := os.Getenv("EFFICACY_PLOT_OUT"); out != "" { // look at it: EFFICACY_PLOT_OUT=/tmp/x.png
				require.NoError(t, os.WriteFile(filepath.Clean(out+"."+name+".png"), buf.Bytes(), 0o644))
			}
		})
	}
}
