import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { Sample } from "./api";

export interface Line { label: string; color: string; dash?: boolean; value: (s: Sample) => number | null }

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
      scales: { y: { range: (_u, _min, max) => [0, Math.max(1, Math.ceil(max * 1.1))] } },
      axes: [{}, { label: "GPUs", size: 48 }],
      series: [{}, ...lines.map((l) => ({ label: l.label, stroke: l.color, width: 2, dash: l.dash ? [6, 4] : undefined }))],
      legend: { live: false },
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
  return <figure class="chart" aria-label={title}><figcaption>{title}</figcaption><div ref={box} /></figure>;
}
