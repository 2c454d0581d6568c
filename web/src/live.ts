import { useEffect, useState } from "preact/hooks";
import type { Me, State } from "./api";

export type Conn = "connecting" | "live" | "reconnecting";

// useLive follows the server's state stream: the server pushes a new state whenever the
// cluster changes (it watches), so pages never poll or need a refresh. EventSource
// reconnects by itself; the badge says when it is doing so.
export function useLive(): [State | null, Conn] {
  const [state, setState] = useState<State | null>(null);
  const [conn, setConn] = useState<Conn>("connecting");
  useEffect(() => {
    let es: EventSource;
    let retry: number | undefined;
    const open = () => {
      es = new EventSource("api/stream");
      es.addEventListener("state", (e) => {
        setState(JSON.parse((e as MessageEvent).data) as State);
        setConn("live");
      });
      es.onerror = () => {
        setConn("reconnecting");
        // A sign-in that expired (or was signed out elsewhere) answers 401: reload, which
        // brings the sign-in page, rather than say "reconnecting" for ever.
        fetch("api/me").then((r) => { if (r.status === 401) location.reload(); }, () => {});
        // EventSource gives up for good on an answer that is not a stream (a 503 while
        // the API server is away): open it again a little later.
        if (es.readyState === EventSource.CLOSED && retry === undefined) {
          retry = window.setTimeout(() => { retry = undefined; open(); }, 3000);
        }
      };
    };
    open();
    return () => { window.clearTimeout(retry); es.close(); };
  }, []);
  return [state, conn];
}

// useMe asks once who the dashboard acts for.
export function useMe(): Me {
  const [me, setMe] = useState<Me>({});
  useEffect(() => {
    fetch("api/me").then((r) => (r.ok ? r.json() : {})).then((m) => setMe(m as Me), () => {});
  }, []);
  return me;
}

// useRoute is the hash route: "#/nodes" → ["nodes"], with its query as a map.
export function useRoute(): [string[], URLSearchParams] {
  const read = (): [string[], URLSearchParams] => {
    const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
    return [path.split("/").filter(Boolean).map(decodeURIComponent), new URLSearchParams(query ?? "")];
  };
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const on = () => setRoute(read());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return route;
}
