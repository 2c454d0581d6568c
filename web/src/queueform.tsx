import { useState } from "preact/hooks";
import type { Queue } from "./api";
import { change } from "./submit";

// The fields of allot queue create and edit, by flag name. list: several values,
// comma-separated (class-node-pools: one CLASS=POOL,POOL a line).
const fields: { flag: string; label: string; hint: string; list?: "comma" | "line" }[] = [
  { flag: "quota", label: "Quota (GPUs guaranteed)", hint: "4" },
  { flag: "limit", label: "Limit (most GPUs held)", hint: "8, or none" },
  { flag: "weight", label: "Over-quota weight", hint: "-1: the quota" },
  { flag: "priority", label: "Priority", hint: "0" },
  { flag: "parent", label: "Department (parent queue)", hint: "research" },
  { flag: "namespaces", label: "Namespaces that may use it", hint: "team-a,team-b", list: "comma" },
  { flag: "node-pools", label: "Node pools", hint: "h100,a100", list: "comma" },
  { flag: "pool-quota", label: "Quota per pool", hint: "h100=4,a100=8", list: "comma" },
  { flag: "class", label: "Class of all its work", hint: "train, interactive, inference or none" },
  { flag: "interactive-time-limit", label: "Interactive time limit", hint: "4h" },
  { flag: "idle-timeout", label: "Idle timeout per class", hint: "interactive=2h,inference=30m", list: "comma" },
  { flag: "idle-threshold", label: "Idle below (GPU %)", hint: "5" },
  { flag: "reclaim-min-runtime", label: "Not reclaimed before", hint: "10m" },
  { flag: "preempt-min-runtime", label: "Not preempted before", hint: "10m" },
  { flag: "host-paths", label: "Host paths allowed", hint: "/data,/scratch; none; any" },
  { flag: "class-node-pools", label: "Pools per class, a line each", hint: "interactive=a100,h100", list: "line" },
];

// QueueForm creates a queue (q undefined) or edits one: only the fields filled are sent,
// as allot queue edit changes only the flags given; the others stay as the queue has them.
// Who may create and change queues is RBAC's to say: the refusal is shown word for word.
export function QueueForm({ q }: { q?: Queue }) {
  const [name, setName] = useState("");
  const [vals, setVals] = useState<Record<string, string>>({});
  const [msg, setMsg] = useState<{ ok: boolean; text: string } | null>(null);
  const send = async (e: Event) => {
    e.preventDefault();
    const flags: Record<string, string[]> = {};
    for (const f of fields) {
      const v = (vals[f.flag] ?? "").trim();
      if (v === "") continue;
      flags[f.flag] = f.list === "comma" ? v.split(",").map((x) => x.trim()).filter((x) => x !== "")
        : f.list === "line" ? v.split("\n").map((x) => x.trim()).filter((x) => x !== "") : [v];
    }
    const { ok, data } = await change("api/queue", { action: q ? "edit" : "create", name: q ? q.name : name.trim(), flags });
    setMsg({ ok, text: ok ? data.message : data.error });
    if (ok && !q) location.hash = `#/queues/${encodeURIComponent(name.trim())}`;
  };
  const current: Record<string, string> = q ? {
    quota: String(q.quota), limit: q.limit === undefined ? "none" : String(q.limit), weight: String(q.weight),
    priority: String(q.priority), parent: q.parent ?? "",
  } : {};
  return (
    <form class="queue-form submit" onSubmit={(e) => void send(e)}>
      {!q && <label class="field field-name"><span>Name <code>NAME</code></span><input name="name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} placeholder="team-e" /></label>}
      {fields.map((f) => (
        <label key={f.flag} class={`field field-${f.flag}`}>
          <span>{f.label} <code>--{f.flag}</code></span>
          {f.list === "line"
            ? <textarea name={f.flag} rows={2} value={vals[f.flag] ?? ""} onInput={(e) => { const v = (e.target as HTMLTextAreaElement).value; setVals((p) => ({ ...p, [f.flag]: v })); }} placeholder={f.hint} />
            : <input name={f.flag} value={vals[f.flag] ?? ""} onInput={(e) => { const v = (e.target as HTMLInputElement).value; setVals((p) => ({ ...p, [f.flag]: v })); }}
                placeholder={current[f.flag] !== undefined && current[f.flag] !== "" ? `now ${current[f.flag]}` : f.hint} />}
        </label>
      ))}
      <div class="buttons">
        <button type="submit" class="send">{q ? `Change ${q.name}` : "Create the queue"}</button>
        {msg && <span class={msg.ok ? "done" : "error refused"} role="status">{msg.text}</span>}
      </div>
    </form>
  );
}
