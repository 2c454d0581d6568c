import type { GPU, Node, State } from "./api";
import { fmt, IdleBelow } from "./api";

// Holders get colours by workload so that a job spread over GPUs reads as one; the
// palette is Okabe and Ito's, told apart with colour-blindness too.
// Each colour comes with the text colour that reads on it.
const palette: [string, string][] = [["#0072B2", "#fff"], ["#E69F00", "#000"], ["#009E73", "#000"], ["#CC79A7", "#000"],
  ["#56B4E9", "#000"], ["#D55E00", "#fff"], ["#F0E442", "#000"], ["#5f5f5f", "#fff"]];
function colour(pod: string): [string, string] {
  // A pod's workload is its name without the random suffix its controller added.
  let h = 0;
  for (const c of pod.replace(/-[a-z0-9]{5}$/, "")) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return palette[h % palette.length];
}
function short(pod: string): string {
  return pod.split("/").pop()!;
}

function Cell({ g }: { g: GPU }) {
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
        {holders.map((h) => (
          <div class="gpu-part" key={h.pod} style={{ flexGrow: h.share, background: colour(h.pod)[0], color: colour(h.pod)[1] }} data-pod={h.pod} data-share={h.share}>
            <span>{short(h.pod)}</span>{h.share < 1 && <span class="share">{fmt(h.share)}</span>}
          </div>
        ))}
        {g.used < 1 && <div class="gpu-part gpu-rest" style={{ flexGrow: 1 - g.used }}><span>{g.used === 0 ? "free" : `${fmt(1 - g.used)} free`}</span></div>}
      </div>
    </div>
  );
}

function NodeCard({ n }: { n: Node }) {
  const free = n.gpus.length - n.allocated;
  return (
    <article class="node" data-node={n.name}>
      <header>
        <h2>{n.name}</h2>
        <span class="node-meta">{n.model}{n.pool ? ` · pool ${n.pool}` : ""} · {Math.round(n.gpuMemoryMi / 1024)} GiB per GPU</span>
        <span class={`node-free ${free > 0 ? "has-free" : ""}`}>{fmt(n.allocated)}/{n.gpus.length} allocated · {fmt(free)} free</span>
      </header>
      <div class="gpus">{n.gpus.map((g) => <Cell g={g} key={g.index} />)}</div>
    </article>
  );
}

export function Nodes({ s }: { s: State }) {
  return (
    <section>
      <h1>Nodes</h1>
      <p class="summary">{fmt(s.totals.allocated)} of {fmt(s.totals.gpus)} GPUs allocated on {s.totals.nodes} nodes · {fmt(s.totals.idle)} free · {s.totals.sharedGPUs} shared
        {s.totals.reporting > 0 && ` · ${fmt(s.totals.idleAllocated)} allocated but idle`}</p>
      {s.nodes.map((n) => <NodeCard n={n} key={n.name} />)}
      {s.nodes.length === 0 && <p class="empty">No GPU nodes.</p>}
    </section>
  );
}
