/**
 * The inspector's pages. Each view renders into the container it is given and
 * returns a function that stops its timers and streams when the page changes.
 */
import { ConnectError, Code } from "@connectrpc/connect";
import { memory } from "./api";
import { h, replaceChildren } from "./dom";

/** Stops a view. */
export type Cleanup = () => void;

/** How often the stats are re-read (no stream exists for them). */
const POLL_MS = 2000;

/** A readable message for a failed call, with a hint for the errors a person can fix. */
export function errorText(err: unknown): string {
  const ce = ConnectError.from(err);
  if (ce.code === Code.Unauthenticated) return `${ce.rawMessage} — enter an API key above.`;
  if (ce.code === Code.PermissionDenied) return `${ce.rawMessage} — this API key may not do that.`;
  return `${Code[ce.code] ?? ce.code}: ${ce.rawMessage}`;
}

/** A failed call as an alert paragraph. */
export function errorBox(err: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, errorText(err));
}

/** Totals over the store, re-read every few seconds. */
export function statsView(root: HTMLElement): Cleanup {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const grid = h("dl", { class: "stats" });
  const message = h("div");
  replaceChildren(root, h("h1", {}, "Stats"), message, grid);
  async function load(): Promise<void> {
    try {
      const s = await memory.getStats({});
      if (stopped) return;
      replaceChildren(message);
      replaceChildren(
        grid,
        ...[
          ["Sessions", String(s.totalSessions)],
          ["Events", String(s.totalEvents)],
          ["Events per session", s.avgEventsPerSession.toFixed(1)],
          ["Backend", s.backend],
        ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-stat": k }, v)]),
      );
    } catch (err) {
      if (!stopped) replaceChildren(message, errorBox(err));
    }
    if (!stopped) timer = setTimeout(() => void load(), POLL_MS);
  }
  void load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });
}
