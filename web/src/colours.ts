import type { State } from "./api";

// Colour by queue, shade by workload: a team's jobs read as one family and one job spread
// over several GPUs or pods as one colour. The hues are Okabe and Ito's, told apart with
// colour-blindness too; queues take them in the order of the queue tree, so a queue keeps
// its colour from page to page.
const hues = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#7a5c99"];
// Shades of one hue for its workloads: the hue itself, then lighter and darker in turn.
const steps = [0, 0.35, -0.3, 0.6, -0.5, 0.2, -0.15, 0.5];

function mix(hex: string, by: number): string {
  const n = parseInt(hex.slice(1), 16);
  const c = [n >> 16, (n >> 8) & 255, n & 255].map((v) => Math.round(by >= 0 ? v + (255 - v) * by : v * (1 + by)));
  return "#" + c.map((v) => v.toString(16).padStart(2, "0")).join("");
}

// textOn is black or white, whichever reads on the background (WCAG's relative luminance).
export function textOn(hex: string): string {
  const n = parseInt(hex.slice(1), 16);
  const lin = [n >> 16, (n >> 8) & 255, n & 255].map((v) => { const s = v / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; });
  const l = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2];
  return (l + 0.05) / 0.05 > 1.05 / (l + 0.05) ? "#000" : "#fff";
}

export interface Owner { queue: string; workload: string; colour: string }

// Colours are what the pages colour with: a hue per queue, and per pod (namespace/name) its
// queue, workload and shade.
export interface Colours { queue: Map<string, string>; pod: Map<string, Owner> }

export const other = "#8a8a8a"; // pods of no queue Allot knows

export function colours(s: State): Colours {
  const queue = new Map<string, string>();
  s.queues.forEach((q, i) => queue.set(q.name, hues[i % hues.length]));
  const pod = new Map<string, Owner>();
  const seen = new Map<string, number>(); // workloads met per queue so far
  for (const w of s.workloads) {
    const k = seen.get(w.queue) ?? 0;
    seen.set(w.queue, k + 1);
    const base = queue.get(w.queue) ?? other;
    const owner = { queue: w.queue, workload: `${w.namespace}/${w.kind}/${w.name}`, colour: mix(base, steps[k % steps.length]) };
    for (const p of w.pods ?? []) pod.set(`${w.namespace}/${p.name}`, owner);
  }
  return { queue, pod };
}
