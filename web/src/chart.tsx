import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { Sample } from "./api";
import { timeIncrs, timeLabels, timeRange } from "./clock";

export interface Line { label: string; color: string; dash?: boolean; fill?: boolean; value: (s: Sample) => number | null }

// TimeChart draws lines over the history samples. The chart is made once and given new
// data on every state, so a live page does not flicker.
export function TimeChart({ history, lines, height = 180, title }: { history: Sample[]; lines: Line[]; height?: number; title: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const data = (): uPlot.AlignedData => [
    history.map((s) => new Date(s.time).getTime() / 1000),
    ...lines.map((l) => history.map((s) => l.value(s))),
  ];
  const key = lines.map((l) => l.label).join("|");
  useEffect(() => {
    const el = box.current!;
    const opts: uPlot.Options = {
      width: Math.max(240, el.clientWidth),
      height,
      scales: {
        x: { range: (u, min, max) => timeRange(u.data?.[0] ?? [], min, max) },
        y: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] },
      },
      // Ticks at least 80 px apart, so that labels never overlap, in whole seconds or more,
      // labelled on a 24-hour clock (clock.ts): never two alike, whatever the history spans.
      // The labels drawn (on the canvas) are also kept on the element, for the tests to read.
      axes: [{
        space: 80, incrs: timeIncrs,
        values: (u, ticks, _axis, _space, incr) => {
          const labels = timeLabels(ticks, incr, u.scales.x.min ?? 0, u.scales.x.max ?? 0);
          el.dataset.xticks = labels.join("|");
          return labels;
        },
        // Room for a second line where the labels carry their date.
        size: (_u, values) => (values?.some((v) => String(v).includes("\n")) ? 62 : 50),
      }, { label: "GPUs", size: 48 }],
      series: [{}, ...lines.map((l) => ({ label: l.label, stroke: l.color, width: l.dash ? 2.5 : 2,
        dash: l.dash ? [7, 5] : undefined, fill: l.fill ? l.color + "26" : undefined }))],
      // The chart's own key (below) says which line is which, with its stroke.
      legend: { show: false },
    };
    plot.current = new uPlot(opts, data(), el);
    const fit = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(240, el.clientWidth), height }));
    fit.observe(el);
    return () => {
      fit.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [key, height]);
  useEffect(() => {
    plot.current?.setData(data());
  }, [history]);
  return (
    <figure class="chart" aria-label={title}>
      <figcaption>{title}</figcaption>
      <div ref={box} />
      <ul class="chart-key">
        {lines.map((l) => (
          <li key={l.label} data-line={l.label} data-dash={l.dash ? "dashed" : "solid"}>
            <svg width="28" height="10" aria-hidden="true">
              {l.fill && <rect x="0" y="3" width="28" height="7" fill={l.color + "26"} />}
              <line x1="0" y1="4" x2="28" y2="4" stroke={l.color} stroke-width="2.5" stroke-dasharray={l.dash ? "7 5" : undefined} />
            </svg>
            {l.label}
          </li>
        ))}
      </ul>
    </figure>
  );
}
