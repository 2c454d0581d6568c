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
// PNG file (by extension).
func Plot(path, title string, sums []Summary) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arrived GPU demand (% of capacity)"
	p.Y.Label.Text = "GPU allocation ratio (%)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, s := range sums {
		pts := make(plotter.XYs, len(s.Curve))
		for k, c := range s.Curve {
			pts[k].X, pts[k].Y = 100*c.Arrived, 100*c.Allocated
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.Policy, err)
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (%.2f%% at %.0f%%)", s.Policy, 100*s.AtEndMean, 100*lastArrived(s)), line)
	}
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}

func lastArrived(s Summary) float64 {
	if len(s.Curve) == 0 {
		return 0
	}
	return s.Curve[len(s.Curve)-1].Arrived
}
