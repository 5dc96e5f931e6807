package efficacy

import (
	"bytes"
	"image/color"
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
	var buf bytes.Buffer
	require.NoError(t, PlotPNG(&buf, curves, 0.3, "Efficacy (test)"))
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, 900, img.Bounds().Dx())
	// Each arm's colour is on the image (its mean line and legend).
	found := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			found[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}] = true
		}
	}
	require.True(t, found[armColors[0]])
	require.True(t, found[armColors[1]])
	if os.Getenv("EFFICACY_PLOT_OUT") != "" { // look at it: EFFICACY_PLOT_OUT=/tmp/x.png
		require.NoError(t, os.WriteFile(filepath.Clean(os.Getenv("EFFICACY_PLOT_OUT")), buf.Bytes(), 0o644))
	}
}
