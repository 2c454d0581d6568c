import type { ComponentChildren } from "preact";
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import type { GPU, MIGInstance, MIGLayout, Node, State } from "./api";
import { fmt, IdleBelow, OtherNamespace } from "./api";
import type { Colours } from "./colours";
import { colours, other, textOn } from "./colours";

function short(pod: string): string {
  return pod.split("/").pop()!;
}

// instanceName is how an instance is written: its profile at its first memory slice.
function instanceName(i: MIGInstance): string {
  return `${i.profile}@${i.start}`;
}

// instanceState says what became of an instance: held by a pod, being made for one, in use
// by something not Allot's, or idle.
function instanceState(i: MIGInstance): string {
  if (i.making) return `being made for ${short(i.pod!)}`;
  if (i.pod) return i.pod === OtherNamespace ? "another namespace" : short(i.pod);
  return i.inUse ? "in use, not Allot's" : "idle";
}

// migLabel says a MIG GPU's layout in words, for its title and screen readers.
function migLabel(g: GPU, m: MIGLayout): string {
  const parts = m.instances.map((i) => `${instanceName(i)} ${instanceState(i)}`);
  return `GPU ${g.index}: MIG, ${m.dynamic ? "laid out by Allot" : "fixed layout"} (${m.model})` + (parts.length > 0 ? `: ${parts.join(", ")}` : ": no instance");
}

// MigParts draws a GPU in MIG mode by its memory slices: each instance as wide as the slices
// it takes, in its holder's colour, an idle one plain; the slices no instance takes are free
// to lay out on a GPU Allot lays out, and give nothing on a fixed layout. A 1g is an eighth
// of a cell: each part says its compute ("3g") and holder, its title the whole name.
function MigParts({ m, c }: { m: MIGLayout; c: Colours }) {
  const out = [];
  let at = 0;
  const gap = (from: number, to: number) => (
    <div class="gpu-part gpu-rest mig-free" key={`free-${from}`} style={{ flexGrow: to - from }} data-free-slices={to - from > 1 ? `${from}-${to - 1}` : `${from}`}>
      <span>{m.dynamic ? "free" : "none"}</span>
    </div>);
  for (const i of [...m.instances].sort((a, b) => a.start - b.start)) {
    if (i.start > at) out.push(gap(at, i.start));
    const o = i.pod && !i.making ? c.pod.get(i.pod) : undefined;
    const held = i.pod !== undefined && i.pod !== "" && !i.making;
    const bg = held ? (o?.colour ?? other) : undefined;
    const state = held ? "held" : i.making ? "making" : i.inUse ? "in-use" : "idle";
    out.push(
      <div class={`gpu-part mig-instance mig-${state}`} key={instanceName(i)} style={{ flexGrow: i.slices, background: bg, color: bg ? textOn(bg) : undefined }}
        data-instance={instanceName(i)} data-state={state} data-pod={i.pod} data-queue={o?.queue ?? ""} title={`${instanceName(i)}: ${instanceState(i)}`}>
        <span>{i.profile.split(".")[0]}</span>
        <span class="part-queue">{instanceState(i)}</span>
      </div>);
    at = Math.max(at, i.start + i.slices);
  }
  if (at < m.memorySlices) out.push(gap(at, m.memorySlices));
  return <div class="gpu-parts">{out}</div>;
}

function Cell({ g, c }: { g: GPU; c: Colours }) {
  const holders = g.holders ?? [];
  const failed = g.unhealthy !== undefined && g.unhealthy !== "";
  // An admin took it out of service (allot.dev/gpu-cordon): nothing new goes there.
  const cordoned = !failed && g.cordoned !== undefined && g.cordoned !== "";
  let label = holders.length === 0 ? `GPU ${g.index}: free` :
    `GPU ${g.index}: ` + holders.map((h) => `${short(h.pod)} ${fmt(h.share)}`).join(", ") + (g.used < 1 ? `, ${fmt(1 - g.used)} free` : "");
  if (failed) label = `GPU ${g.index}: failed, ${g.unhealthy}` + (holders.length > 0 ? `; still held by ${holders.map((h) => short(h.pod)).join(", ")}` : "");
  if (cordoned) label = `GPU ${g.index}: cordoned, ${g.cordoned}` + (holders.length > 0 ? `; still held by ${holders.map((h) => short(h.pod)).join(", ")}` : "");
  if (g.mig && !failed && !cordoned) label = migLabel(g, g.mig);
  const out = failed || cordoned;
  const util = g.utilization;
  const idle = util !== undefined && util < IdleBelow && holders.length > 0;
  return (
    <div class={`gpu ${holders.length === 0 && !out ? "gpu-free" : ""} ${holders.length > 1 ? "gpu-shared" : ""} ${failed ? "gpu-failed" : ""} ${cordoned ? "gpu-cordoned" : ""}`}
      title={label + (util !== undefined ? `; ${util}% busy` : "") + (g.uuid ? `; ${g.uuid}` : "")} aria-label={label} data-gpu={g.index}
      data-failed={failed ? g.unhealthy : undefined} data-cordoned={cordoned ? g.cordoned : undefined} data-mig={g.mig ? (g.mig.dynamic ? "dynamic" : "fixed") : undefined}>
      <div class="gpu-index"><span>GPU {g.index}{failed && <span class="gpu-failed-badge">failed</span>}{cordoned && <span class="gpu-cordoned-badge">cordoned</span>}
        {g.mig && <span class="gpu-mig-badge">MIG</span>}</span>{util !== undefined && !failed &&
        <span class={`gpu-util ${idle ? "gpu-idle" : ""}`} data-util={util}>{idle ? `idle ${util}%` : `${util}%`}</span>}</div>
      {failed && <div class="gpu-failed-reason">{g.unhealthy}</div>}
      {cordoned && <div class="gpu-cordoned-reason">{g.cordoned}</div>}
      {g.mig && <div class="mig-kind" title={g.mig.dynamic ? "Allot makes and destroys this GPU's instances as pods need them (allot.dev/mig-dynamic)" : "a layout an admin made: pods take the instances it has"}>
        {g.mig.dynamic ? "dynamic" : "fixed"} · {g.mig.model}</div>}
      {g.mig && <MigParts m={g.mig} c={c} />}
      {!g.mig && <div class="gpu-parts">
        {holders.map((h) => {
          const o = c.pod.get(h.pod);
          const bg = o?.colour ?? other;
          return (
            <div class="gpu-part" key={h.pod} style={{ flexGrow: h.share, background: bg, color: textOn(bg) }} data-pod={h.pod} data-share={h.share}
              data-queue={o?.queue ?? ""} data-workload={o?.workload ?? ""}>
              <span>{h.pod === OtherNamespace ? "another namespace" : short(h.pod)}</span>
              <span class="part-queue">{o?.queue ?? (h.pod === OtherNamespace ? "in use" : "not Allot's")}{h.share < 1 && <b class="share"> {fmt(h.share)}</b>}</span>
            </div>
          );
        })}
        {g.used < 1 && !out && <div class="gpu-part gpu-rest" style={{ flexGrow: 1 - g.used }}><span>{g.used === 0 ? "free" : `${fmt(1 - g.used)} free`}</span></div>}
      </div>}
    </div>
  );
}

// MinCell is the least width of a GPU's cell, in px (as in app.css): at 1280 px an 8-GPU
// node's GPUs stand on one row.
const MinCell = 128;

// columns is how many GPU cells a row of a node's grid holds, for n GPUs in width px with
// gap px between cells: as many as fit, where all n fit on one row (so every node's cells
// are the same width); where they do not, rows as even as can be: 8 GPUs as 4 + 4 rather
// than 7 + 1, or 3 + 3 + 2 rather than 6 + 2.
export function columns(n: number, width: number, gap: number): number {
  const fit = Math.max(1, Math.floor((width + gap) / (MinCell + gap)));
  return n <= fit ? fit : Math.ceil(n / Math.ceil(n / fit));
}

// Gpus is a node's grid of GPU cells, its columns fitted to its width as it changes.
function Gpus({ n, children }: { n: number; children: ComponentChildren }) {
  const box = useRef<HTMLDivElement>(null);
  const [cols, setCols] = useState(0);
  useLayoutEffect(() => {
    const el = box.current!;
    const fit = () => setCols(columns(n, el.clientWidth, parseFloat(getComputedStyle(el).columnGap) || 0));
    fit();
    const watch = new ResizeObserver(fit);
    watch.observe(el);
    return () => watch.disconnect();
  }, [n]);
  return <div class="gpus" ref={box} data-columns={cols || undefined}
    style={cols ? { gridTemplateColumns: `repeat(${cols}, minmax(0, 1fr))` } : undefined}>{children}</div>;
}

function NodeCard({ n, c }: { n: Node; c: Colours }) {
  const free = n.gpus.length - n.allocated;
  return (
    <article class="node" data-node={n.name} data-kind={n.accelerator ?? "nvidia"}>
      <header>
        <h2>{n.name}</h2>
        <span class="node-meta">{n.model}{n.accelerator ? ` [${n.accelerator}]` : ""}{n.pool ? ` · pool ${n.pool}` : ""} · {Math.round(n.gpuMemoryMi / 1024)} GiB per GPU
          {n.sharing ? ` · sharing: ${n.sharing}` : ""}
          {n.compute && n.compute !== "capped" ? <span data-compute={n.compute}>{` · compute ${n.compute}`}</span> : ""}</span>
        <span class={`node-free ${free > 0 ? "has-free" : ""}`}>{fmt(n.allocated)}/{n.gpus.length} allocated · {fmt(free)} free</span>
      </header>
      {n.sharingWarning && <p class="node-warning" role="note" data-sharing-warning>{n.sharingWarning}</p>}
      <Gpus n={n.gpus.length}>{n.gpus.map((g) => <Cell g={g} c={c} key={g.index} />)}</Gpus>
    </article>
  );
}

// path is a node's domains down to level k, which names one domain of that level.
function path(n: Node, k: number): string {
  return (n.topology ?? []).slice(0, k + 1).map((p) => p.domain).join("/");
}

// Grouped lays the nodes out under their Topology's domains (the server sends them sorted
// by it): a heading where a domain begins, with what its nodes hold.
function Grouped({ s, c }: { s: State; c: Colours }) {
  const held = new Map<string, { allocated: number; gpus: number }>();
  for (const n of s.nodes) {
    (n.topology ?? []).forEach((_, k) => {
      const t = held.get(path(n, k)) ?? { allocated: 0, gpus: 0 };
      t.allocated += n.allocated;
      t.gpus += n.gpus.length;
      held.set(path(n, k), t);
    });
  }
  const out = [];
  let prev: Node | undefined;
  for (const n of s.nodes) {
    const levels = n.topology ?? [];
    levels.forEach((p, k) => {
      if (prev !== undefined && path(prev, k) === path(n, k)) return;
      const t = held.get(path(n, k))!;
      out.push(
        <h2 class="domain" key={`${k}:${path(n, k)}`} data-level={p.level} data-domain={p.domain} style={{ marginLeft: `${k * 1.2}em` }}>
          {p.level} {p.domain || "(none)"} <span class="node-meta">{fmt(t.allocated)}/{t.gpus} allocated · {fmt(t.gpus - t.allocated)} free</span>
        </h2>);
    });
    out.push(<div key={n.name} style={{ marginLeft: `${levels.length * 1.2}em` }}><NodeCard n={n} c={c} /></div>);
    prev = n;
  }
  return <>{out}</>;
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
      <Grouped s={s} c={c} />
      {s.nodes.length === 0 && <p class="empty">No GPU nodes.</p>}
    </section>
  );
}
