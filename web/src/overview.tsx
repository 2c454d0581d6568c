import type { State } from "./api";
import { fmt, IdleBelow } from "./api";
import { TimeChart } from "./chart";
import { QueueBar, QueueLegend } from "./queuebar";

function Stat({ label, value, note, id }: { label: string; value: string; note?: string; id: string }) {
  return (
    <div class="stat" data-stat={id}>
      <div class="stat-value">{value}</div>
      <div class="stat-label">{label}</div>
      {note && <div class="stat-note">{note}</div>}
    </div>
  );
}

const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;

export function Overview({ s }: { s: State }) {
  const t = s.totals;
  const pct = t.gpus > 0 ? Math.round((100 * t.allocated) / t.gpus) : 0;
  const scale = Math.max(1, ...s.queues.map((q) => Math.max(q.quota, q.fairShare, q.allocated + q.pendingGPUs)));
  return (
    <section>
      <h1>Overview</h1>
      <div class="stats">
        <Stat id="gpus" label="GPUs" value={fmt(t.gpus)} note={`on ${plural(t.nodes, "node")}`} />
        <Stat id="allocated" label="Allocated" value={fmt(t.allocated)} note={`${pct}% of the cluster`} />
        <Stat id="idle" label="Idle" value={fmt(t.idle)} note="no pod holds them" />
        <Stat id="idle-allocated" label="Idle allocated" value={t.reporting > 0 ? fmt(t.idleAllocated) : "–"}
          note={t.reporting > 0 ? `held, under ${IdleBelow}% busy` : "no GPU utilisation reported"} />
        <Stat id="shared" label="Shared GPUs" value={String(t.sharedGPUs)} note="held by fractions of several pods" />
        <Stat id="running" label="Running workloads" value={String(t.running)} note={plural(t.runningPods, "pod")} />
        <Stat id="pending" label="Pending workloads" value={String(t.pending)} note={`${plural(t.pendingPods, "pod")} waiting`} />
      </div>
      <TimeChart title="Cluster GPU allocation over time" history={s.history} lines={[
        { label: "allocated", color: "#0072B2", value: (p) => p.allocated },
        { label: "idle allocated", color: "#D55E00", value: (p) => p.idleAllocated },
        { label: "total", color: "#6b6b6b", dash: true, value: (p) => p.gpus },
      ]} />
      <h2>Queues</h2>
      <QueueLegend />
      <table class="queues-overview">
        <thead><tr><th scope="col">Queue</th><th scope="col" class="wide">Allocation</th><th scope="col">Allocated</th><th scope="col">Quota</th><th scope="col">Fair share</th><th scope="col">Running</th><th scope="col">Pending</th></tr></thead>
        <tbody>
          {s.queues.map((q) => (
            <tr data-queue={q.name} key={q.name}>
              <th scope="row" style={{ paddingLeft: `${0.5 + q.depth * 1.2}em` }}>{q.name}</th>
              <td class="wide"><QueueBar q={q} scale={scale} /></td>
              <td class="num">{fmt(q.allocated)}{q.borrowed > 0 && <span class="borrowed"> ({fmt(q.borrowed)} borrowed)</span>}</td>
              <td class="num">{fmt(q.quota)}</td>
              <td class="num">{fmt(q.fairShare)}</td>
              <td class="num">{q.running}</td>
              <td class="num">{q.pending}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {s.queues.length === 0 && <p class="empty">No queues yet: <code>allot queue create team-a --quota 4</code> makes one.</p>}
    </section>
  );
}
