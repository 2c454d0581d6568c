import { useEffect, useState } from "preact/hooks";
import type { Event, State } from "./api";
import { age, fmt } from "./api";
import { TimeChart } from "./chart";
import { statusClass, workloadHref } from "./workloads";
import { QueueForm } from "./queueform";

// What /api/queues/NAME adds to the state: the pods stopped for the queue's jobs and its own
// pods stopped for other queues', from the scheduler's Evicted Events, newest first.
type Reclaims = { name: string; took: Event[]; lost: Event[] };

// QueuePage is one queue: its rules and where it stands, its GPUs over time, its workloads
// and the reclaims it made and suffered. The reclaims are asked again as the state moves.
export function QueuePage({ s, name, writes }: { s: State; name: string; writes: boolean }) {
  const q = s.queues.find((x) => x.name === name);
  const [rec, setRec] = useState<Reclaims | null>(null);
  const [err, setErr] = useState("");
  useEffect(() => {
    let stop = false;
    fetch(`api/queues/${encodeURIComponent(name)}`)
      .then(async (r) => (r.ok ? r.json() : Promise.reject(new Error(await r.text()))))
      .then((x: Reclaims) => { if (!stop) { setRec(x); setErr(""); } })
      .catch((e: Error) => { if (!stop) setErr(e.message); });
    return () => { stop = true; };
  }, [name, s.version]);
  if (!q) return <section><h1>{name}</h1><p class="error">No queue {name} that you may see.</p><a href="#/queues">All queues</a></section>;
  const now = new Date(s.time);
  const members = s.workloads.filter((w) => w.queue === name);
  const events = (title: string, cls: string, list: Event[] | undefined) => (
    <>
      <h2>{title}</h2>
      {list && list.length === 0 && <p class="empty">None.</p>}
      {list && list.length > 0 && (
        <table class={`events ${cls}`}>
          <thead><tr><th scope="col">When</th><th scope="col">Pod</th><th scope="col">Why</th></tr></thead>
          <tbody>{list.map((e, i) => <tr key={i}><td class="num">{age(e.time, now)}</td><td>{e.object}</td><td>{e.message}</td></tr>)}</tbody>
        </table>
      )}
    </>
  );
  return (
    <section class="queue-page">
      <p><a href="#/queues">← All queues</a></p>
      <h1>{q.name}</h1>
      <dl class="facts">
        {q.parent && <><dt>Parent</dt><dd><a href={`#/queues/${encodeURIComponent(q.parent)}`}>{q.parent}</a></dd></>}
        <dt>Quota</dt><dd>{fmt(q.quota)} GPUs</dd>
        <dt>Limit</dt><dd>{q.limit === undefined ? "none" : `${fmt(q.limit)} GPUs`}</dd>
        <dt>Weight</dt><dd>{fmt(q.weight)}</dd>
        <dt>Priority</dt><dd>{q.priority}</dd>
        <dt>Fair share</dt><dd>{fmt(q.fairShare)} GPUs</dd>
        <dt>Allocated</dt><dd class="allocated">{fmt(q.allocated)} GPUs{q.borrowed > 0 && `, ${fmt(q.borrowed)} borrowed`}</dd>
        <dt>Workloads</dt><dd>{q.running} running, {q.pending} pending</dd>
      </dl>
      {writes && <details class="edit-queue"><summary>Edit {q.name}</summary><QueueForm key={q.name} q={q} /></details>}
      <TimeChart key={q.name} title={`${q.name}: allocated and fair share`} height={180} history={s.history} lines={[
        { label: "allocated", color: "#0072B2", fill: true, value: (p) => p.queues[q.name]?.allocated ?? null },
        { label: "fair share", color: "#D55E00", dash: true, value: (p) => p.queues[q.name]?.fairShare ?? null },
      ]} />
      <h2>Workloads</h2>
      {members.length === 0 && <p class="empty">None that you may see.</p>}
      {members.length > 0 && (
        <table class="workloads queue-members">
          <thead><tr><th scope="col">Name</th><th scope="col">Namespace</th><th scope="col">Status</th><th scope="col">GPUs</th><th scope="col">Why it waits</th></tr></thead>
          <tbody>{members.map((w) => (
            <tr key={`${w.namespace}/${w.kind}/${w.name}`} data-member={w.name}>
              <td><a href={workloadHref(w)}>{w.name}</a></td><td>{w.namespace}</td>
              <td><span class={statusClass(w.status)}>{w.status}</span></td>
              <td class="num">{fmt(w.gpusAllocated)}</td><td class="reason">{w.reason ?? ""}</td>
            </tr>))}
          </tbody>
        </table>
      )}
      {err && <p class="error">{err}</p>}
      {events("Taken for its jobs", "reclaims-took", rec?.took)}
      {events("Taken from it", "reclaims-lost", rec?.lost)}
    </section>
  );
}
