import { useEffect, useState } from "preact/hooks";

// One group's GPU-hours, as /api/consumption sums them (kube/consumption): given, of
// those the ones whose utilisation was measured, and their busy part.
type Line = { by: string[]; gpuHours: number; measuredGPUHours: number; usedGPUHours: number; cost?: number };
type Report = { from: string; to: string; by: string[]; days: number; lines: Line[]; unpriced?: string };

const groupings = ["queue", "department", "user", "pool", "model", "day", "day,queue", "department,queue", "queue,user", "pool,model"];

// Consumption shows the GPU-hours of a period of days (this month by default) by queue,
// user, node pool or GPU model: a table with a bar per line, as allot report prints it.
// It asks again when the period or grouping changes, and as the cluster's state moves on
// (the scheduler counts every 30 s). Only those who may read the figures (list ConfigMaps
// in allot-system) get them; the others are told so.
export function Consumption({ query, version }: { query: URLSearchParams; version: number }) {
  const [by, setBy] = useState(query.get("by") ?? "queue");
  const [from, setFrom] = useState(query.get("from") ?? "");
  const [to, setTo] = useState(query.get("to") ?? "");
  const [rep, setRep] = useState<Report | null>(null);
  const [err, setErr] = useState("");
  // Once a minute at most: the figures move every 30 s, the state every second.
  const tick = Math.floor(version / 60);
  useEffect(() => {
    let stop = false;
    const p = new URLSearchParams({ by });
    if (from) p.set("from", from);
    if (to) p.set("to", to);
    fetch(`api/consumption?${p}`)
      .then(async (r) => (r.ok ? r.json() : Promise.reject(new Error(await r.text()))))
      .then((x: Report) => { if (!stop) { setRep(x); setErr(""); } })
      .catch((e: Error) => { if (!stop) { setErr(e.message); setRep(null); } });
    return () => { stop = true; };
  }, [by, from, to, tick]);
  const dims = by.split(",");
  const most = Math.max(1e-9, ...(rep?.lines ?? []).map((l) => l.gpuHours));
  // Costs where the chart was given prices (consumption.prices) for every pool and model.
  const priced = (rep?.lines ?? []).some((l) => l.cost !== undefined);
  return (
    <section class="consumption">
      <h1>GPU consumption</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>By <select id="consumption-by" value={by} onChange={(e) => setBy((e.target as HTMLSelectElement).value)}>
          {groupings.map((g) => <option key={g} value={g}>{g.replace(",", " and ")}</option>)}
        </select></label>
        <label>From <input id="consumption-from" type="date" value={from || rep?.from || ""} onChange={(e) => setFrom((e.target as HTMLInputElement).value)} /></label>
        <label>To <input id="consumption-to" type="date" value={to || rep?.to || ""} onChange={(e) => setTo((e.target as HTMLInputElement).value)} /></label>
      </form>
      {err && <p class="error">{err}</p>}
      {rep && <p class="note">{rep.from} to {rep.to}, UTC days; {rep.days} with figures. GPU-hours count a share of a GPU as that share; used is the busy part of those whose utilisation the GPUs' agent reported.</p>}
      {rep?.unpriced && <p class="note">No cost: {rep.unpriced}</p>}
      {rep && rep.lines.length === 0 && <p class="empty">Nothing counted in these days.</p>}
      {rep && rep.lines.length > 0 && (
        <table class="consumption-table">
          <thead><tr>
            {dims.map((d) => <th key={d} scope="col">{d[0].toUpperCase() + d.slice(1)}</th>)}
            <th scope="col">GPU-hours</th><th scope="col" class="bar-col">Given and used</th><th scope="col">Used</th><th scope="col">Util</th>
            {priced && <th scope="col">Cost</th>}
          </tr></thead>
          <tbody>
            {rep.lines.map((l) => (
              <tr key={l.by.join("/")} data-line={l.by.join("/")}>
                {l.by.map((v, i) => (i === 0 ? <th key={i} scope="row">{v}</th> : <td key={i}>{v}</td>))}
                <td class="num" data-gpu-hours>{l.gpuHours.toFixed(2)}</td>
                <td class="bar-col">
                  <div class="consumption-bar" style={{ width: `${(100 * l.gpuHours) / most}%` }} title={`${l.gpuHours.toFixed(2)} GPU-hours given`}>
                    <div class="consumption-used" style={{ width: `${l.gpuHours > 0 ? (100 * l.usedGPUHours) / l.gpuHours : 0}%` }} />
                  </div>
                </td>
                <td class="num">{l.usedGPUHours.toFixed(2)}</td>
                <td class="num" data-util>{l.measuredGPUHours > 0 ? `${Math.round((100 * l.usedGPUHours) / l.measuredGPUHours)}%` : "-"}</td>
                {priced && <td class="num" data-cost>{l.cost?.toFixed(2)}</td>}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
