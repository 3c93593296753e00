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

/** Errors a retry cannot mend: the view stops and shows them. */
const FINAL_CODES: readonly Code[] = [Code.NotFound, Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument];

/** What a view shows while `retrying` runs: its live badge and its message slot. */
export interface RetryDisplay {
  setLive: (state: "reconnecting" | "ended", text: string) => void;
  message: Element;
}

/**
 * Runs `attempt` until it returns true (done) or `signal` aborts, backing off
 * (200 ms doubling to 5 s) and showing "reconnecting…" between tries. An
 * error a retry cannot mend (NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED,
 * INVALID_ARGUMENT) stops it and is shown. `attempt` calls `connected` when a
 * try got through, so the next failure backs off from the start again.
 */
export async function retrying(
  signal: AbortSignal,
  display: RetryDisplay,
  attempt: (connected: () => void) => Promise<boolean>,
): Promise<void> {
  let failures = 0;
  const connected = () => {
    failures = 0;
  };
  while (!signal.aborted) {
    try {
      if (await attempt(connected)) return;
    } catch (err) {
      if (signal.aborted) return;
      const ce = ConnectError.from(err);
      if (FINAL_CODES.includes(ce.code)) {
        display.setLive("ended", "stopped");
        replaceChildren(display.message, errorBox(ce));
        return;
      }
    }
    failures++;
    display.setLive("reconnecting", "reconnecting…");
    await sleep(Math.min(5000, 200 * 2 ** Math.min(failures, 5)), signal);
  }
}
