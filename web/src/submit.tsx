import { useEffect, useState } from "preact/hooks";
import type { State, Workload } from "./api";

// The console's changes (kube/dashboard/writes.go): each is sent as JSON with the header
// the server asks of its own pages, and made as the person signed in, so that a refusal is
// the API server's, RBAC's or a webhook's, shown here word for word.
export async function change(path: string, body: unknown): Promise<{ ok: boolean; data: any }> {
  const r = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Allot-Console": "1" },
    body: JSON.stringify(body),
  });
  let data: any;
  try { data = await r.json(); } catch { data = { error: `${r.status} ${r.statusText}` }; }
  return { ok: r.ok, data };
}

// words splits a command line on spaces, keeping what is quoted together, as a shell would
// for a plain command (no variables, no globs).
export function words(line: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m: RegExpExecArray | null;
  while ((m = re.exec(line)) !== null) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

interface Room {
  queue: string; quota: number; limit?: number; allocated: number; asking: number; idle: number;
  outlook: string; waiting?: { name: string; reason: string }[];
}
interface Result { objects?: string; room?: Room; problem?: string; message?: string; error?: string }

const types = [
  { v: "train", label: "Training (a batch Job)" },
  { v: "distributed", label: "Distributed training (--workers)" },
  { v: "interactive", label: "Interactive (a notebook, suspendable)" },
  { v: "inference", label: "Inference (a Deployment)" },
];

// SubmitPage is allot submit in a form: the same fields under the flags' names, a preview
// of the objects with the queue's room before anything is made, then the submission.
export function SubmitPage({ s }: { s: State }) {
  const queues = s.queues.map((q) => q.name);
  const namespaces = Array.from(new Set(s.workloads.map((w) => w.namespace))).sort();
  const [f, setF] = useState({
    name: "", namespace: namespaces[0] ?? "default", queue: queues[0] ?? "", type: "train", image: "", command: "",
    gpu: "", gpuMemory: "", workers: "", replicas: "", cpu: "", memory: "", env: "", port: "", duration: "", template: "",
  });
  // The workspace templates the person may use in the namespace (its own, then the
  // cluster's), asked again when the namespace changes.
  const [tpls, setTpls] = useState<{ name: string; cluster?: boolean; description?: string }[]>([]);
  useEffect(() => {
    let stop = false;
    fetch(`api/templates?namespace=${encodeURIComponent(f.namespace)}`)
      .then((r) => (r.ok ? r.json() : []))
      .then((x) => { if (!stop) setTpls(x); }, () => {});
    return () => { stop = true; };
  }, [f.namespace]);
  const [res, setRes] = useState<Result | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (k: keyof typeof f) => (e: Event) => {
    const v = (e.target as HTMLInputElement).value;
    setF((prev) => ({ ...prev, [k]: v }));
    setRes(null);
  };
  const send = async (preview: boolean) => {
    setBusy(true);
    const body = {
      name: f.name, namespace: f.namespace, queue: f.queue, type: f.type, image: f.image, command: words(f.command),
      template: f.template, gpu: f.gpu, gpuMemory: f.gpuMemory, workers: f.workers, replicas: f.replicas, cpu: f.cpu, memory: f.memory,
      env: f.env.split("\n").map((x) => x.trim()).filter((x) => x !== ""), port: f.port ? Number(f.port) : 0, duration: f.duration,
    };
    try {
      const { data } = await change(preview ? "api/submit?preview" : "api/submit", body);
      setRes(data as Result);
    } catch (e) {
      setRes({ error: String(e) });
    } finally {
      setBusy(false);
    }
  };
  const field = (k: keyof typeof f, label: string, flag: string, hint = "") => (
    <label class={`field field-${k}`}>
      <span>{label} <code>{flag}</code></span>
      <input name={k} value={f[k]} onInput={set(k)} placeholder={hint} />
    </label>
  );
  return (
    <section class="submit">
      <h1>Submit a workload</h1>
      <p class="hint">The same as <code>allot submit</code>, made as you: what you may not do, Kubernetes refuses, in its words.</p>
      <form onSubmit={(e) => { e.preventDefault(); void send(false); }}>
        {field("name", "Name", "NAME", "resnet")}
        <label class="field field-namespace"><span>Namespace <code>-n</code></span>
          <input name="namespace" list="namespaces" value={f.namespace} onInput={set("namespace")} />
          <datalist id="namespaces">{namespaces.map((n) => <option key={n} value={n} />)}</datalist>
        </label>
        <label class="field field-queue"><span>Queue <code>-p</code></span>
          <input name="queue" list="queues" value={f.queue} onInput={set("queue")} />
          <datalist id="queues">{queues.map((n) => <option key={n} value={n} />)}</datalist>
        </label>
        <label class="field field-type"><span>Type</span>
          <select name="type" value={f.type} onChange={set("type")}>{types.map((t) => <option key={t.v} value={t.v}>{t.label}</option>)}</select>
        </label>
        <label class="field field-template"><span>Template <code>--template</code></span>
          <select name="template" value={f.template} onChange={set("template")}>
            <option value="">none</option>
            {tpls.map((t) => <option key={`${t.cluster}/${t.name}`} value={t.name} title={t.description}>{t.name}{t.cluster ? " (cluster)" : ""}{t.description ? ` — ${t.description}` : ""}</option>)}
          </select>
        </label>
        {field("image", "Image", "-i", f.template ? "the template's" : "pytorch/pytorch")}
        {field("command", "Command", "-- COMMAND", "python train.py --epochs 10")}
        {field("gpu", "GPUs", "-g", f.template ? "the template's" : "1, 2 or 0.5")}
        {field("gpuMemory", "GPU memory", "--gpu-memory", "8Gi, instead of -g")}
        {f.type === "distributed" && field("workers", "Workers", "--workers", "4, or 2:8 (elastic)")}
        {f.type === "inference" && field("replicas", "Replicas", "--replicas", "2, or 1:4 (autoscaled)")}
        {(f.type === "interactive" || f.type === "inference") && field("port", "Port", "--port", "8888")}
        {field("cpu", "CPU", "--cpu", "4")}
        {field("memory", "Memory", "--memory", "16Gi")}
        {field("duration", "Duration", "--duration", "simulated nodes only: 10m")}
        <label class="field field-env"><span>Environment <code>-e</code>, one NAME=VALUE a line</span>
          <textarea name="env" value={f.env} onInput={set("env")} rows={2} />
        </label>
        <div class="buttons">
          <button type="button" class="preview" disabled={busy} onClick={() => void send(true)}>Preview</button>
          <button type="submit" class="send" disabled={busy}>Submit</button>
        </div>
      </form>
      {res && <SubmitOutcome r={res} />}
    </section>
  );
}

function SubmitOutcome({ r }: { r: Result }) {
  return (
    <div class="outcome" role="status">
      {r.error && <p class="error refused">{r.error}</p>}
      {r.message && <p class="done">{r.message}</p>}
      {r.problem && <p class="error problem">It would be refused: {r.problem}</p>}
      {r.room && (
        <div class="room">
          <h2>Queue {r.room.queue}</h2>
          <p>{r.room.allocated} of {r.room.quota} GPUs held{r.room.limit !== undefined ? `, limit ${r.room.limit}` : ""}; this asks {r.room.asking}; {r.room.idle} free in the cluster.</p>
          <p class="outlook">{r.room.outlook}</p>
          {r.room.waiting && r.room.waiting.length > 0 && (
            <table class="waiting"><thead><tr><th scope="col">Waiting</th><th scope="col">Why, as the scheduler says</th></tr></thead>
              <tbody>{r.room.waiting.map((w) => <tr key={w.name}><td>{w.name}</td><td>{w.reason}</td></tr>)}</tbody></table>
          )}
        </div>
      )}
      {r.objects && <><h2>Objects</h2><pre class="objects">{r.objects}</pre></>}
    </div>
  );
}

// Actions are a workload's Open, Suspend, Resume and Delete, made as the person; the page follows
// the change through the live state.
export function Actions({ w, connect }: { w: Workload; connect: boolean }) {
  const [msg, setMsg] = useState<{ ok: boolean; text: string } | null>(null);
  // Delete asks twice: the first click only arms it.
  const [armed, setArmed] = useState(false);
  const act = async (action: string) => {
    setArmed(false);
    const { ok, data } = await change("api/act", { action, namespace: w.namespace, name: `${w.kind}/${w.name}` });
    setMsg({ ok, text: ok ? data.message : data.error });
  };
  // Open: the server checks, as the person, that they may port-forward to the workload's
  // pod and answers with a one-time link to the tool's own host. The tab is opened at the
  // click (a tab opened after the answer would be a pop-up), cut from this page (no
  // opener: the tool's pages are the workload's code), then sent to the link.
  const open = async () => {
    const tab = window.open("", "_blank");
    if (tab) tab.opener = null;
    const { ok, data } = await change("api/connect", { namespace: w.namespace, name: `${w.kind}/${w.name}` });
    setMsg({ ok, text: ok ? data.message : data.error });
    if (ok && tab) tab.location.href = data.url;
    else if (ok) setMsg({ ok, text: `${data.message}: ${data.url}` });
    else tab?.close();
  };
  const suspended = w.status === "Suspended";
  const openable = connect && !suspended && (w.type === "interactive" || w.type === "inference");
  return (
    <div class="actions">
      {openable && <button type="button" class="open" onClick={() => void open()}>Open</button>}
      {suspended
        ? <button type="button" class="resume" onClick={() => void act("resume")}>Resume</button>
        : <button type="button" class="suspend" onClick={() => void act("suspend")}>Suspend</button>}
      {armed
        ? <button type="button" class="delete armed" onClick={() => void act("delete")}>Delete {w.name} and its pods: sure?</button>
        : <button type="button" class="delete" onClick={() => setArmed(true)}>Delete</button>}
      {msg && <span class={msg.ok ? "done" : "error refused"} role="status">{msg.text}</span>}
    </div>
  );
}
