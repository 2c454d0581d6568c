import type { Queue } from "./api";
import { fmt } from "./api";

// QueueBar draws a queue's allocation against its quota and fair share on a scale shared
// by all queues: the part within quota solid, the borrowed part hatched, the quota a solid
// mark and the fair share a dashed one. The figures are written beside it as well.
export function QueueBar({ q, scale }: { q: Queue; scale: number }) {
  const pct = (n: number) => `${Math.min(100, (100 * n) / Math.max(scale, 1))}%`;
  const within = Math.min(q.allocated, q.quota);
  return (
    <div class="qbar" role="img"
      aria-label={`${q.name}: ${fmt(q.allocated)} allocated of quota ${fmt(q.quota)}, fair share ${fmt(q.fairShare)}, ${fmt(q.borrowed)} borrowed`}>
      <div class="qbar-track">
        <div class="qbar-within" style={{ width: pct(within) }} />
        {q.borrowed > 0 && <div class="qbar-borrowed" style={{ left: pct(within), width: pct(q.borrowed) }} />}
        {q.pendingGPUs > 0 && <div class="qbar-pending" style={{ left: pct(q.allocated), width: pct(q.pendingGPUs) }} />}
        <div class="qbar-quota" style={{ left: pct(q.quota) }} title={`quota ${fmt(q.quota)}`} />
        <div class="qbar-fair" style={{ left: pct(q.fairShare) }} title={`fair share ${fmt(q.fairShare)}`} />
      </div>
    </div>
  );
}

export function QueueLegend() {
  return (
    <p class="legend">
      <span><i class="sw sw-within" />allocated within quota</span>
      <span><i class="sw sw-borrowed" />borrowed</span>
      <span><i class="sw sw-pending" />waiting</span>
      <span><i class="sw sw-quota" />quota</span>
      <span><i class="sw sw-fair" />fair share</span>
    </p>
  );
}
