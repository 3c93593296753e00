/** Maps the URL fragment to a view: "#/?app=&user=&type=&q=&page=", "#/session/<id>?type=&seq=", "#/memories?app=&user=…", "#/stats". */
import { memoriesView } from "./memories";
import { sessionsView } from "./sessions";
import { sessionView } from "./session";
import { statsView, type Cleanup } from "./views";

/** The view for a fragment and the nav entry to highlight. */
export function routeOf(hash: string): { view: (root: HTMLElement) => Cleanup; nav: string } {
  const [path = "", query = ""] = hash.replace(/^#/, "").split("?", 2);
  const session = /^\/session\/(.+)$/.exec(path);
  if (session) {
    const id = decodeURIComponent(session[1]!);
    return { view: (root) => sessionView(root, id, new URLSearchParams(query)), nav: "sessions" };
  }
  if (path === "/memories") return { view: (root) => memoriesView(root, new URLSearchParams(query)), nav: "memories" };
  if (path === "/stats") return { view: statsView, nav: "stats" };
  return { view: (root) => sessionsView(root, new URLSearchParams(query)), nav: "sessions" };
}
