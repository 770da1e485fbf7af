package replay

import (
	"encoding/csv"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

// WriteTable prints the results as an aligned table.
func WriteTable(w io.Writer, results []Result, bound float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\thit rate\t% of bound\tTTFT p50 ms\tp90\tp99\tE2E p50 ms\tp99\tthroughput tok/s\tspread\tdone\trejected\twall s\t")
	for _, r := range results {
		pct := 0.0
		if bound > 0 {
			pct = 100 * r.HitRate / bound
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.2f\t%d\t%d\t%.1f\t\n",
			r.Mode, r.HitRate, pct, ms(r.TTFT[0]), ms(r.TTFT[1]), ms(r.TTFT[2]), ms(r.E2E[0]), ms(r.E2E[2]),
			r.Throughput, r.Spread, r.Completed, r.Rejected, r.Wall.Seconds())
	}
	fmt.Fprintf(tw, "reuse bound\t%.3f\t100.0\t\t\t\t\t\t\t\t\t\t\t\n", bound)
	return tw.Flush()
}

// WriteCSV writes the results as CSV with a header row.
func WriteCSV(w io.Writer, results []Result, bound float64) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"mode", "hit_rate", "reuse_bound", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms",
		"throughput_tok_s", "spread", "completed", "rejected", "makespan_s"})
	for _, r := range results {
		_ = cw.Write([]string{r.Mode, strconv.FormatFloat(r.HitRate, 'f', 4, 64), strconv.FormatFloat(bound, 'f', 4, 64),
			ms(r.TTFT[0]), ms(r.TTFT[1]), ms(r.TTFT[2]), ms(r.E2E[0]), ms(r.E2E[1]), ms(r.E2E[2]),
			strconv.FormatFloat(r.Throughput, 'f', 1, 64), strconv.FormatFloat(r.Spread, 'f', 3, 64),
			strconv.Itoa(r.Completed), strconv.Itoa(r.Rejected), strconv.FormatFloat(r.Makespan.Seconds(), 'f', 1, 64)})
	}
	cw.Flush()
	return cw.Error()
}

var (
	white  = color.RGBA{255, 255, 255, 255}
	black  = color.RGBA{20, 20, 20, 255}
	grey   = color.RGBA{200, 200, 200, 255}
	blue   = color.RGBA{55, 110, 190, 255}
	orange = color.RGBA{230, 130, 40, 255}
	red    = color.RGBA{200, 40, 40, 255}
)

// WritePNG draws two bar charts side by side: TTFT p90 per mode, and the
// prefix hit rate per mode against the reuse bound.
func WritePNG(w io.Writer, results []Result, bound float64) error {
	const width, height, panel = 1200, 520, 600
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	maxTTFT := 0.0
	for _, r := range results {
		maxTTFT = max(maxTTFT, float64(r.TTFT[1])/float64(time.Millisecond))
	}
	bars(img, 0, panel, "TTFT p90 (ms)", results, maxTTFT, -1, blue, func(r Result) float64 {
		return float64(r.TTFT[1]) / float64(time.Millisecond)
	})
	bars(img, panel, panel, "prefix hit rate (red line: reuse bound)", results, math.Max(bound, 1e-9)*1.1, bound, orange, func(r Result) float64 {
		return r.HitRate
	})
	return png.Encode(w, img)
}

func bars(img *image.RGBA, x0, width int, title string, results []Result, top, line float64, c color.RGBA, value func(Result) float64) {
	const plotTop, plotBottom = 50, 400
	label(img, x0+20, 30, title, black)
	left, right := x0+60, x0+width-20
	fill(img, left, plotBottom, right, plotBottom+1, black)
	fill(img, left, plotTop, left+1, plotBottom, black)
	if top <= 0 {
		top = 1
	}
	for i := 0; i <= 4; i++ {
		y := plotBottom - (plotBottom-plotTop)*i/4
		fill(img, left+1, y, right, y+1, grey)
		label(img, x0+5, y+4, strconv.FormatFloat(top*float64(i)/4, 'g', 3, 64), black)
	}
	n := max(len(results), 1)
	slot := (right - left) / n
	for i, r := range results {
		v := value(r)
		h := int(float64(plotBottom-plotTop) * math.Min(v/top, 1))
		bx := left + i*slot + slot/5
		fill(img, bx, plotBottom-h, bx+slot*3/5, plotBottom, c)
		label(img, bx, plotBottom-h-4, strconv.FormatFloat(v, 'g', 3, 64), black)
		label(img, left+i*slot+2, plotBottom+20+(i%2)*16, r.Mode, black)
	}
	if line >= 0 {
		y := plotBottom - int(float64(plotBottom-plotTop)*math.Min(line/top, 1))
		fill(img, left+1, y, right, y+2, red)
	}
}

func fill(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), &image.Uniform{c}, image.Point{}, draw.Src)
}

func label(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
