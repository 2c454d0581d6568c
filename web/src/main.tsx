import { render } from "preact";
import "./app.css";
import { useLive, useMe, useRoute } from "./live";
import { Overview } from "./overview";
import { Nodes } from "./nodes";
import { Workloads, WorkloadDetail } from "./workloads";
import { Queues } from "./queues";
import { Consumption } from "./consumption";
import { QueuePage } from "./queuepage";
import { SubmitPage } from "./submit";
import { QueueForm } from "./queueform";

const pages = [
  { path: "", label: "Overview" },
  { path: "nodes", label: "Nodes" },
  { path: "workloads", label: "Workloads" },
  { path: "queues", label: "Queues" },
  { path: "consumption", label: "Consumption" },
];

function App() {
  const [s, conn] = useLive();
  const me = useMe();
  const [route, query] = useRoute();
  const page = route[0] ?? "";
  let body;
  if (!s) body = <p class="loading">Connecting to Allot…</p>;
  else if (page === "nodes") body = <Nodes s={s} />;
  else if (page === "workloads" && route.length >= 3) body = <WorkloadDetail s={s} ns={route[1]} name={route.slice(2).join("/")} writes={!!me.writes} connect={!!me.connect} />;
  else if (page === "submit") body = me.writes ? <SubmitPage s={s} /> : <p class="error">This console is read-only: its administrator turns changes on (allot dashboard --writes, the chart's dashboard.writes).</p>;
  else if (page === "workloads") body = <Workloads s={s} query={query} />;
  else if (page === "queues" && route[1] === "new") body = me.writes ? <section><h1>New queue</h1><QueueForm /></section> : <p class="error">This console is read-only.</p>;
  else if (page === "queues" && route.length >= 2) body = <QueuePage s={s} name={route[1]} writes={!!me.writes} />;
  else if (page === "queues" && me.writes) body = <><Queues s={s} /><p><a class="new-queue" href="#/queues/new">New queue…</a></p></>;
  else if (page === "queues") body = <Queues s={s} />;
  else if (page === "consumption") body = <Consumption query={query} version={s.version} />;
  else body = <Overview s={s} />;
  return (
    <>
      <header class="top">
        <a class="brand" href="#/">Allot</a>
        <nav aria-label="pages">
          {pages.map((p) => <a key={p.path} href={`#/${p.path}`} aria-current={page === p.path ? "page" : undefined}>{p.label}</a>)}
          {me.writes && <a href="#/submit" aria-current={page === "submit" ? "page" : undefined}>Submit</a>}
        </nav>
        <span class={`conn conn-${conn}`} role="status">{conn === "live" ? "● live" : conn === "connecting" ? "connecting…" : "reconnecting…"}</span>
        {me.user && <span class="who" title="the Kubernetes identity the dashboard shows this page as">{me.user}{me.signOut && <> · <a href="logout">sign out</a></>}</span>}
      </header>
      <main data-version={s?.version ?? 0}>{body}</main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
