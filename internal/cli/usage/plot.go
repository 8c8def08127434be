package usage

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Render draws the history as a PNG: GPU utilization (%) per pod above, GPU
// memory in use (GiB) per pod below, over the seconds since the start; a
// pod's line breaks where it was not running.
func Render(h *History, title string, w io.Writer) error {
	util, mem := plot.New(), plot.New()
	util.Title.Text = title
	util.Y.Label.Text = "GPU utilization (%)"
	util.Y.Min, util.Y.Max = 0, 100
	mem.Y.Label.Text = "GPU memory in use (GiB)"
	mem.Y.Min = 0
	mem.X.Label.Text = "seconds since the start"
	for _, p := range []*plot.Plot{util, mem} {
		p.X.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*10, -vg.Millimeter
	}
	for i, s := range h.Series {
		for j, seg := range s.Segments() {
			u, m := make(plotter.XYs, len(seg)), make(plotter.XYs, len(seg))
			for k, pt := range seg {
				u[k] = plotter.XY{X: pt.T.Seconds(), Y: 100 * pt.Utilization}
				m[k] = plotter.XY{X: pt.T.Seconds(), Y: pt.MemoryUsed / (1 << 30)}
			}
			for _, l := range []struct {
				p   *plot.Plot
				xys plotter.XYs
			}{{util, u}, {mem, m}} {
				line, points, err := plotter.NewLinePoints(l.xys)
				if err != nil {
					return fmt.Errorf("plot %s: %w", s.Pod, err)
				}
				line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
				line.Width = vg.Points(2)
				points.Shape = plotutil.Shape(i)
				l.p.Add(line, points)
				if j == 0 && l.p == util {
					l.p.Legend.Add(fmt.Sprintf("%s (%s)", s.Pod, s.Node), line, points)
				}
			}
		}
	}
	img := vgimg.New(10*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadY: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{util}, {mem}}, tiles, dc)
	util.Draw(canvases[0][0])
	mem.Draw(canvases[1][0])
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write the PNG: %w", err)
	}
	return nil
}
