import type { GPU, Node, State } from "./api";
import { fmt, IdleBelow } from "./api";
import type { Colours } from "./colours";
import { colours, other, textOn } from "./colours";

function short(pod: string): string {
  return pod.split("/").pop()!;
}

function Cell({ g, c }: { g: GPU; c: Colours }) {
  const holders = g.holders ?? [];
  const label = holders.length === 0 ? `GPU ${g.index}: free` :
    `GPU ${g.index}: ` + holders.map((h) => `${short(h.pod)} ${fmt(h.share)}`).join(", ") + (g.used < 1 ? `, ${fmt(1 - g.used)} free` : "");
  const util = g.utilization;
  const idle = util !== undefined && util < IdleBelow && holders.length > 0;
  return (
    <div class={`gpu ${holders.length === 0 ? "gpu-free" : ""} ${holders.length > 1 ? "gpu-shared" : ""}`}
      title={label + (util !== undefined ? `; ${util}% busy` : "")} aria-label={label} data-gpu={g.index}>
      <div class="gpu-index">GPU {g.index}{util !== undefined &&
        <span class={`gpu-util ${idle ? "gpu-idle" : ""}`} data-util={util}>{idle ? `idle ${util}%` : `${util}%`}</span>}</div>
      <div class="gpu-parts">
        {holders.map((h) => {
          const o = c.pod.get(h.pod);
          const bg = o?.colour ?? other;
          return (
            <div class="gpu-part" key={h.pod} style={{ flexGrow: h.share, background: bg, color: textOn(bg) }} data-pod={h.pod} data-share={h.share}
              data-queue={o?.queue ?? ""} data-workload={o?.workload ?? ""}>
              <span>{short(h.pod)}</span>
              <span class="part-queue">{o?.queue ?? "not Allot's"}{h.share < 1 && <b class="share"> {fmt(h.share)}</b>}</span>
            </div>
          );
        })}
        {g.used < 1 && <div class="gpu-part gpu-rest" style={{ flexGrow: 1 - g.used }}><span>{g.used === 0 ? "free" : `${fmt(1 - g.used)} free`}</span></div>}
      </div>
    </div>
  );
}

function NodeCard({ n, c }: { n: Node; c: Colours }) {
  const free = n.gpus.length - n.allocated;
  return (
    <article class="node" data-node={n.name}>
      <header>
        <h2>{n.name}</h2>
        <span class="node-meta">{n.model}{n.pool ? ` · pool ${n.pool}` : ""} · {Math.round(n.gpuMemoryMi / 1024)} GiB per GPU</span>
        <span class={`node-free ${free > 0 ? "has-free" : ""}`}>{fmt(n.allocated)}/{n.gpus.length} allocated · {fmt(free)} free</span>
      </header>
      <div class="gpus">{n.gpus.map((g) => <Cell g={g} c={c} key={g.index} />)}</div>
    </article>
  );
}

export function Nodes({ s }: { s: State }) {
  const c = colours(s);
  return (
    <section>
      <h1>Nodes</h1>
      <p class="summary">{fmt(s.totals.allocated)} of {fmt(s.totals.gpus)} GPUs allocated on {s.totals.nodes} nodes · {fmt(s.totals.idle)} free · {s.totals.sharedGPUs} shared
        {s.totals.reporting > 0 && ` · ${fmt(s.totals.idleAllocated)} allocated but idle`}</p>
      <ul class="legend queue-legend" aria-label="colours by queue">
        {s.queues.map((q) => (
          <li key={q.name} data-legend-queue={q.name}><span class="sw" style={{ background: c.queue.get(q.name) }} />{q.name}</li>
        ))}
        <li><span class="sw" style={{ background: other }} />not Allot's</li>
        <li class="legend-note">one colour per queue; its workloads in shades of it</li>
      </ul>
      {s.nodes.map((n) => <NodeCard n={n} c={c} key={n.name} />)}
      {s.nodes.length === 0 && <p class="empty">No GPU nodes.</p>}
    </section>
  );
}
