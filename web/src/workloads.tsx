import { useEffect, useState } from "preact/hooks";
import type { Detail, State, Workload } from "./api";
import { age, fmt, idleSentence } from "./api";
import { full, when } from "./clock";
import { Actions } from "./submit";

const statuses = ["Running", "Running (partly)", "Pending", "Suspended", "Succeeded", "Failed"];

function setQuery(q: URLSearchParams) {
  const s = q.toString();
  location.hash = "#/workloads" + (s ? `?${s}` : "");
}

export function statusClass(st: string): string {
  return "status status-" + st.toLowerCase().replace(/[^a-z]+/g, "-").replace(/-$/, "");
}

// Sorting: each key is how a column compares; the query keeps it (sort=gpus&desc=1) so that
// a sorted page survives a reload and can be linked.
const sorts: Record<string, (a: Workload, b: Workload) => number> = {
  name: (a, b) => a.name.localeCompare(b.name) || a.namespace.localeCompare(b.namespace),
  namespace: (a, b) => a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name),
  queue: (a, b) => a.queue.localeCompare(b.queue),
  type: (a, b) => a.type.localeCompare(b.type),
  status: (a, b) => a.status.localeCompare(b.status),
  gpus: (a, b) => a.gpusAllocated - b.gpusAllocated || a.gpusRequested - b.gpusRequested,
  age: (a, b) => new Date(b.created).getTime() - new Date(a.created).getTime(),
  // Longest idle first when ascending is reversed; busy (no idleSince) after every idle one.
  idle: (a, b) => (a.idleSince ? new Date(a.idleSince).getTime() : Number.MAX_SAFE_INTEGER) - (b.idleSince ? new Date(b.idleSince).getTime() : Number.MAX_SAFE_INTEGER),
};

// workloadHref links a workload's page by namespace, kind and name: two workloads of one
// namespace may share a name (a Job and a bare pod).
export function workloadHref(w: Workload): string {
  return `#/workloads/${encodeURIComponent(w.namespace)}/${encodeURIComponent(w.kind)}/${encodeURIComponent(w.name)}`;
}

export function Workloads({ s, query }: { s: State; query: URLSearchParams }) {
  const queue = query.get("queue") ?? "";
  const status = query.get("status") ?? "";
  const search = (query.get("q") ?? "").toLowerCase();
  const sort = sorts[query.get("sort") ?? ""] ? query.get("sort")! : "name";
  const desc = query.get("desc") === "1";
  const now = new Date(s.time);
  const rows = s.workloads
    .filter((w) => (!queue || w.queue === queue) && (!status || w.status === status) &&
      (!search || w.name.toLowerCase().includes(search) || w.namespace.toLowerCase().includes(search)))
    .sort((a, b) => (desc ? -1 : 1) * sorts[sort](a, b));
  // From the address, not this render's query: two changes may come before a render.
  const current = () => new URLSearchParams(location.hash.split("?")[1] ?? "");
  const set = (k: string, v: string) => {
    const q = current();
    v ? q.set(k, v) : q.delete(k);
    setQuery(q);
  };
  const change = (k: string) => (e: Event) => set(k, (e.target as HTMLSelectElement | HTMLInputElement).value);
  const sortBy = (k: string) => () => {
    const q = current();
    const again = (q.get("sort") ?? "name") === k && q.get("desc") !== "1";
    q.set("sort", k);
    again ? q.set("desc", "1") : q.delete("desc");
    setQuery(q);
  };
  const head = (k: string, label: string) => (
    <th scope="col" aria-sort={sort === k ? (desc ? "descending" : "ascending") : "none"}>
      <button class="sort" data-sort={k} onClick={sortBy(k)}>{label}{sort === k ? (desc ? " ▼" : " ▲") : ""}</button>
    </th>
  );
  return (
    <section>
      <h1>Workloads</h1>
      <div class="filters">
        <label>Search <input id="filter-search" type="search" placeholder="name or namespace" value={query.get("q") ?? ""} onInput={change("q")} /></label>
        <label>Queue <select id="filter-queue" value={queue} onChange={change("queue")}>
          <option value="">all</option>
          {s.queues.map((q) => <option value={q.name} key={q.name}>{q.name}</option>)}
        </select></label>
        <label>Status <select id="filter-status" value={status} onChange={change("status")}>
          <option value="">all</option>
          {statuses.map((st) => <option value={st} key={st}>{st}</option>)}
        </select></label>
        <span class="count">{rows.length} of {s.workloads.length}</span>
      </div>
      <table class="workloads">
        <thead><tr>{head("name", "Name")}{head("namespace", "Namespace")}{head("queue", "Queue")}{head("type", "Type")}{head("status", "Status")}
          {head("gpus", "GPUs")}<th scope="col" title="how busy its whole GPUs are, as their agents last reported">GPU use</th><th scope="col">Nodes</th>{head("age", "Age")}{head("idle", "Idle")}<th scope="col">Why it waits</th></tr></thead>
        <tbody>
          {rows.map((w) => (
            <tr key={`${w.namespace}/${w.kind}/${w.name}`} data-workload={w.name}>
              <td><a href={workloadHref(w)}>{w.name}</a> <span class="ns">{w.kind}</span></td>
              <td>{w.namespace}</td>
              <td>{w.queue}</td>
              <td>{w.type}</td>
              <td><span class={statusClass(w.status)}>{w.status}</span></td>
              <td class="num">{fmt(w.gpusAllocated)}{w.gpusRequested !== w.gpusAllocated && `/${fmt(w.gpusRequested)}`}</td>
              <td class="num gpu-use">{w.gpuUse?.utilization !== undefined ? `${w.gpuUse.utilization}%` : "-"}</td>
              <td>{w.nodes.join(", ")}</td>
              <td class="num">{age(w.created, now)}</td>
              <td class="num idle" title="how long every GPU it holds has been under its queue's idle threshold">{w.idleSince ? age(w.idleSince, now) : "-"}</td>
              <td class="reason">{w.reason ?? ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {rows.length === 0 && <p class="empty">No workloads{queue || status || search ? " match the filters" : ""}.</p>}
    </section>
  );
}

// WorkloadDetail fetches one workload's pods, events and timeline, again whenever the
// cluster's state moves on. The page is updated in place: what it shows stays until the
// next answer replaces it, and "Loading…" is only for the first. name may be KIND/NAME.
export function WorkloadDetail({ s, ns, name, writes, connect }: { s: State; ns: string; name: string; writes: boolean; connect: boolean }) {
  const [d, setD] = useState<{ key: string; detail: Detail } | null>(null);
  const [err, setErr] = useState("");
  const key = `${ns}/${name}`;
  useEffect(() => {
    let stop = false;
    fetch(`api/workloads/${encodeURIComponent(ns)}/${name.split("/").map(encodeURIComponent).join("/")}`)
      .then(async (r) => (r.ok ? r.json() : Promise.reject(new Error(await r.text()))))
      .then((x: Detail) => { if (!stop) { setD({ key, detail: x }); setErr(""); } })
      .catch((e: Error) => { if (!stop) setErr(e.message); });
    return () => { stop = true; };
  }, [key, s.version]);
  const title = name.split("/").pop();
  if (err && d?.key !== key) return <section><h1>{title}</h1><p class="error">{err}</p><a href="#/workloads">All workloads</a></section>;
  if (!d || d.key !== key) return <section><h1>{title}</h1><p class="loading">Loading…</p></section>;
  const w: Workload = d.detail.workload;
  // Times on the 24-hour clock of the charts, with their date where not today.
  const now = new Date(s.time);
  return (
    <section class="detail">
      <p><a href="#/workloads">← All workloads</a></p>
      <h1>{w.name} <span class={statusClass(w.status)}>{w.status}</span></h1>
      {err && <p class="error">{err}</p>}
      {writes && <Actions w={w} connect={connect} />}
      <dl class="facts">
        <dt>Kind</dt><dd>{w.kind}</dd>
        <dt>Queue</dt><dd>{w.queue}</dd>
        <dt>Type</dt><dd>{w.type}</dd>
        <dt>Namespace</dt><dd>{w.namespace}</dd>
        {w.createdBy && <><dt>Created by</dt><dd class="created-by">{w.createdBy}</dd></>}
        {w.progress && <><dt>Progress</dt><dd class="progress">{w.progress}</dd></>}
        {w.runningSince && <><dt>Running</dt><dd class="running-since">for {age(w.runningSince, now)}</dd></>}
        <dt>GPUs</dt><dd>{fmt(w.gpusAllocated)} of {fmt(w.gpusRequested)}</dd>
        <dt>Pods</dt><dd>{w.running} running, {w.pending} pending</dd>
        {w.reason && <><dt>Why it waits</dt><dd class="reason">{w.reason}</dd></>}
        {w.idleSuspended && w.status === "Suspended" && <><dt>Idle</dt><dd class="idle">{idleSentence(w.idleSuspended)}; allot resume {w.name} starts it again</dd></>}
        {!w.idleSuspended && w.idleSince && <><dt>Idle</dt><dd class="idle">every GPU it holds, for {age(w.idleSince, now)}</dd></>}
        {w.type === "interactive" && <><dt>Open</dt><dd class="open"><code>{openCommand(w)}</code> — forwards its port to this machine and opens it in the browser</dd></>}
      </dl>
      <h2>Timeline</h2>
      <ol class="timeline">
        {d.detail.timeline.map((t, i) => (
          <li key={i} class={`step step-${t.what.toLowerCase()}`}>
            <time dateTime={t.time} title={full(t.time)}>{when(t.time, now)}</time>
            <strong>{t.what}</strong>{t.pods && t.pods > 1 ? ` (${t.pods} pods)` : ""}
            {t.message && <span class="msg"> — {t.message}</span>}
          </li>
        ))}
      </ol>
      <h2>Pods</h2>
      <table class="pods">
        <thead><tr><th scope="col">Pod</th><th scope="col">Phase</th><th scope="col">Node</th><th scope="col">GPUs</th><th scope="col">Why it waits</th></tr></thead>
        <tbody>{(w.pods ?? []).map((p) => (
          <tr key={p.name}><td>{p.name}</td><td>{p.phase}</td><td>{p.node ?? ""}</td><td>{p.gpus ?? fmt(p.gpusRequested)}</td><td class="reason">{p.reason ?? ""}</td></tr>
        ))}</tbody>
      </table>
      <h2>Events</h2>
      <table class="events">
        <thead><tr><th scope="col">When</th><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Object</th><th scope="col">Message</th></tr></thead>
        <tbody>{d.detail.events.map((e, i) => (
          <tr key={i} class={e.type === "Warning" ? "warn" : ""}><td><time dateTime={e.time} title={full(e.time)}>{when(e.time, now)}</time></td><td>{e.type}</td><td>{e.reason}{e.count > 1 ? ` ×${e.count}` : ""}</td><td>{e.object}</td><td>{e.message}</td></tr>
        ))}</tbody>
      </table>
    </section>
  );
}

// openCommand is the command that opens an interactive workload from the user's machine:
// the browser cannot reach a pod, the CLI forwards its port through the API server.
function openCommand(w: Workload): string {
  return `allot open ${w.name}${w.namespace === "default" ? "" : ` -n ${w.namespace}`}`;
}
