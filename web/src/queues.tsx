import type { KindRow, State } from "./api";
import { fmt } from "./api";
import { TimeChart } from "./chart";

export function Queues({ s }: { s: State }) {
  return (
    <section>
      <h1>Queues</h1>
      <table class="queue-tree">
        <thead><tr>
          <th scope="col">Queue</th><th scope="col">Priority</th><th scope="col">Quota</th><th scope="col">Weight</th><th scope="col">Limit</th>
          <th scope="col">Fair share</th><th scope="col">Allocated</th><th scope="col">Borrowed</th>
          <th scope="col" title="GPU-hours above quota, each halved per half-life since: what the scheduler's --usage-strength weighs">Past use (GPU-h)</th><th scope="col">Non-preemptible</th>
          <th scope="col">Pending GPUs</th><th scope="col">Running</th><th scope="col">Pending</th>
        </tr></thead>
        <tbody>
          {s.queues.map((q) => (
            <tr key={q.name} data-queue={q.name}>
              <th scope="row" style={{ paddingLeft: `${0.5 + q.depth * 1.2}em` }}>{q.depth > 0 ? "└ " : ""}<a href={`#/queues/${encodeURIComponent(q.name)}`}>{q.name}</a></th>
              <td class="num">{q.priority}</td>
              <td class="num">{fmt(q.quota)}</td>
              <td class="num">{fmt(q.weight)}</td>
              <td class="num">{q.limit === undefined ? "none" : fmt(q.limit)}</td>
              <td class="num">{fmt(q.fairShare)}</td>
              <td class="num">{fmt(q.allocated)}</td>
              <td class="num">{fmt(q.borrowed)}</td>
              <td class="num" data-past-use>{q.pastUseGPUHours === undefined ? "-" : q.pastUseGPUHours.toFixed(1)}</td>
              <td class="num">{fmt(q.allocatedNonPreemptible)}</td>
              <td class="num">{fmt(q.pendingGPUs)}</td>
              <td class="num">{q.running}</td>
              <td class="num">{q.pending}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <NodePools s={s} />
      <OtherKinds s={s} />
      <h2>Allocated and fair share over time</h2>
      <div class="charts">
        {s.queues.map((q) => (
          <TimeChart key={q.name} title={q.name} height={140} history={s.history} lines={[
            { label: "allocated", color: "#0072B2", fill: true, value: (p) => p.queues[q.name]?.allocated ?? null },
            { label: "fair share", color: "#D55E00", dash: true, value: (p) => p.queues[q.name]?.fairShare ?? null },
          ]} />
        ))}
      </div>
    </section>
  );
}

// NodePools shows each queue's GPUs of the node pools divided apart, each with its own
// quota: only where some queue has any. A queue's row above counts the other pools' GPUs.
function NodePools({ s }: { s: State }) {
  return (
    <KindTable s={s} rowsOf={(q) => q.pools} cls="queue-pools" what="Pool" attr="data-pool"
      title="Node pools divided apart" note="Each pool below has quotas of its own; a queue's row above counts the GPUs of the other pools." />
  );
}

// OtherKinds shows each queue's devices of other vendors' kinds (Ascend, AMD, …), counted
// apart from its NVIDIA GPUs: only where some queue has any.
function OtherKinds({ s }: { s: State }) {
  return <KindTable s={s} rowsOf={(q) => q.accelerators} cls="queue-kinds" what="Kind" attr="data-kind" title="Other accelerators" />;
}

// KindTable lists, per queue, its quota, limit, fair share, allocation and requests of
// each kind its rows give (a pool, an accelerator kind); nothing where no queue has any.
function KindTable({ s, rowsOf, cls, what, attr, title, note }: {
  s: State; rowsOf: (q: State["queues"][number]) => KindRow[] | undefined;
  cls: string; what: string; attr: string; title: string; note?: string;
}) {
  const rows = s.queues.flatMap((q) => (rowsOf(q) ?? []).map((k) => ({ q, k })));
  if (rows.length === 0) {
    return null;
  }
  return (
    <>
      <h2>{title}</h2>
      {note && <p>{note}</p>}
      <table class={cls}>
        <thead><tr>
          <th scope="col">Queue</th><th scope="col">{what}</th><th scope="col">Quota</th><th scope="col">Limit</th>
          <th scope="col">Fair share</th><th scope="col">Allocated</th><th scope="col">Requested</th>
        </tr></thead>
        <tbody>
          {rows.map(({ q, k }) => (
            <tr key={q.name + "/" + k.kind} data-queue={q.name} {...{ [attr]: k.kind }}>
              <th scope="row">{q.name}</th>
              <td title={k.resource}>{k.kind}</td>
              <td class="num">{fmt(k.quota)}</td>
              <td class="num">{k.limit === undefined ? "none" : fmt(k.limit)}</td>
              <td class="num">{fmt(k.fairShare)}</td>
              <td class="num">{fmt(k.allocated)}</td>
              <td class="num">{fmt(k.requested)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}
