import { useEffect, useState } from "preact/hooks";
import type { State } from "./api";

export type Conn = "connecting" | "live" | "reconnecting";

// useLive follows the server's state stream: the server pushes a new state whenever the
// cluster changes (it watches), so pages never poll or need a refresh. EventSource
// reconnects by itself; the badge says when it is doing so.
export function useLive(): [State | null, Conn] {
  const [state, setState] = useState<State | null>(null);
  const [conn, setConn] = useState<Conn>("connecting");
  useEffect(() => {
    const es = new EventSource("api/stream");
    es.addEventListener("state", (e) => {
      setState(JSON.parse((e as MessageEvent).data) as State);
      setConn("live");
    });
    es.onerror = () => setConn("reconnecting");
    return () => es.close();
  }, []);
  return [state, conn];
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
