package trace

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette is distinguishable for common colour-vision deficiencies (Okabe–Ito).
var palette = []color.RGBA{
	{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 0, 0, 255},
}

// Plot writes allocation ratio against arrived demand, one line per policy, to an SVG or
// PNG file (by extension). Below 70% every policy places everything, so the axes start
// there to show where they differ.
func Plot(path, title string, sums []Summary, tune float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arrived GPU demand (% of capacity)"
	p.Y.Label.Text = "GPU allocation ratio (%)"
	p.X.Min, p.Y.Min = 70, 70
	p.X.Max = 100 * tune
	p.Legend.Top = false // bottom right, clear of the lines
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, s := range sums {
		var pts plotter.XYs
		for _, c := range s.Curve {
			if c.Arrived >= 0.7 {
				pts = append(pts, plotter.XY{X: 100 * c.Arrived, Y: 100 * c.Allocated})
			}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.Policy, err)
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s: %.2f%% at %.0f%%", s.Policy, 100*s.AtEndMean, 100*tune), line)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}
