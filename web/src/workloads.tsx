import { useEffect, useState } from "preact/hooks";
import type { Detail, State, Workload } from "./api";
import { age, fmt } from "./api";

const statuses = ["Running", "Running (partly)", "Pending", "Suspended", "Succeeded", "Failed"];

function setQuery(q: URLSearchParams) {
  const s = q.toString();
  location.hash = "#/workloads" + (s ? `?${s}` : "");
}

function statusClass(st: string): string {
  return "status status-" + st.toLowerCase().replace(/[^a-z]+/g, "-").replace(/-$/, "");
}

export function Workloads({ s, query }: { s: State; query: URLSearchParams }) {
  const queue = query.get("queue") ?? "";
  const status = query.get("status") ?? "";
  const now = new Date(s.time);
  const rows = s.workloads.filter((w) => (!queue || w.queue === queue) && (!status || w.status === status));
  const change = (k: string) => (e: Event) => {
    // From the address, not this render's query: two changes may come before a render.
    const q = new URLSearchParams(location.hash.split("?")[1] ?? "");
    const v = (e.target as HTMLSelectElement).value;
    v ? q.set(k, v) : q.delete(k);
    setQuery(q);
  };
  return (
    <section>
      <h1>Workloads</h1>
      <div class="filters">
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
        <thead><tr><th scope="col">Name</th><th scope="col">Queue</th><th scope="col">Type</th><th scope="col">Status</th><th scope="col">GPUs</th><th scope="col">Nodes</th><th scope="col">Age</th><th scope="col">Why it waits</th></tr></thead>
        <tbody>
          {rows.map((w) => (
            <tr key={`${w.namespace}/${w.name}`} data-workload={w.name}>
              <td><a href={`#/workloads/${encodeURIComponent(w.namespace)}/${encodeURIComponent(w.name)}`}>{w.name}</a>{w.namespace !== "default" && <span class="ns"> {w.namespace}</span>}</td>
              <td>{w.queue}</td>
              <td>{w.type}</td>
              <td><span class={statusClass(w.status)}>{w.status}</span></td>
              <td class="num">{fmt(w.gpusAllocated)}{w.gpusRequested !== w.gpusAllocated && `/${fmt(w.gpusRequested)}`}</td>
              <td>{w.nodes.join(", ")}</td>
              <td class="num">{age(w.created, now)}</td>
              <td class="reason">{w.reason ?? ""}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {rows.length === 0 && <p class="empty">No workloads{queue || status ? " match the filters" : ""}.</p>}
    </section>
  );
}

// WorkloadDetail fetches one workload's pods, events and timeline, again whenever the
// cluster's state moves on.
export function WorkloadDetail({ s, ns, name }: { s: State; ns: string; name: string }) {
  const [d, setD] = useState<Detail | null>(null);
  const [err, setErr] = useState("");
  useEffect(() => {
    let stop = false;
    fetch(`api/workloads/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`)
      .then(async (r) => (r.ok ? r.json() : Promise.reject(new Error(await r.text()))))
      .then((x: Detail) => { if (!stop) { setD(x); setErr(""); } })
      .catch((e: Error) => { if (!stop) setErr(e.message); });
    return () => { stop = true; };
  }, [ns, name, s.version]);
  if (err) return <section><h1>{name}</h1><p class="error">{err}</p><a href="#/workloads">All workloads</a></section>;
  if (!d) return <section><h1>{name}</h1><p>Loading…</p></section>;
  const w: Workload = d.workload;
  return (
    <section class="detail">
      <p><a href="#/workloads">← All workloads</a></p>
      <h1>{w.name} <span class={statusClass(w.status)}>{w.status}</span></h1>
      <dl class="facts">
        <dt>Queue</dt><dd>{w.queue}</dd>
        <dt>Type</dt><dd>{w.type}</dd>
        <dt>Namespace</dt><dd>{w.namespace}</dd>
        <dt>GPUs</dt><dd>{fmt(w.gpusAllocated)} of {fmt(w.gpusRequested)}</dd>
        <dt>Pods</dt><dd>{w.running} running, {w.pending} pending</dd>
        {w.reason && <><dt>Why it waits</dt><dd class="reason">{w.reason}</dd></>}
      </dl>
      <h2>Timeline</h2>
      <ol class="timeline">
        {d.timeline.map((t, i) => (
          <li key={i} class={`step step-${t.what.toLowerCase()}`}>
            <time dateTime={t.time}>{new Date(t.time).toLocaleTimeString()}</time>
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
        <tbody>{d.events.map((e, i) => (
          <tr key={i} class={e.type === "Warning" ? "warn" : ""}><td>{new Date(e.time).toLocaleTimeString()}</td><td>{e.type}</td><td>{e.reason}{e.count > 1 ? ` ×${e.count}` : ""}</td><td>{e.object}</td><td>{e.message}</td></tr>
        ))}</tbody>
      </table>
    </section>
  );
}
