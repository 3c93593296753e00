/**
 * A session's state panel: the merged state GetSession answers (ADK's model),
 * grouped as the session's own keys, the user's ("user:") and the app's
 * ("app:"), with the session's version. The session view re-reads it when a
 * live event carries a state_delta rather than applying the delta here: the
 * "user:" and "app:" keys are shared with the user's and the app's other
 * sessions, UpdateSession changes state without an event, and the version
 * counts appends rather than events — only the server knows all three.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import type { Session } from "@engram/gen";
import { h, replaceChildren } from "./dom";
import { jsonView } from "./events";

/** The groups a merged state's keys fall in, by prefix, in the order shown. */
const GROUPS = [
  { name: "session", title: "Session", prefix: "" },
  { name: "user", title: "User (user:)", prefix: "user:" },
  { name: "app", title: "App (app:)", prefix: "app:" },
] as const;

/** The group a merged state key belongs to. */
export function stateGroupOf(key: string): (typeof GROUPS)[number]["name"] {
  if (key.startsWith("user:")) return "user";
  if (key.startsWith("app:")) return "app";
  return "session";
}

/** An empty state panel, hidden until the session has state. */
export function statePanel(): HTMLElement {
  return h("section", { class: "panel state", hidden: true, "aria-label": "session state" });
}

/** Shows `session`'s merged state and version in `panel` (hidden while the session has none and never had any). */
export function renderState(panel: HTMLElement, session: Session): void {
  const state: JsonObject = session.state ?? {};
  const keys = Object.keys(state).sort();
  panel.hidden = keys.length === 0 && session.version === 0n;
  if (panel.hidden) return;
  replaceChildren(
    panel,
    h(
      "h2",
      {},
      "State ",
      h(
        "span",
        {
          class: "muted state-version",
          title: "Session.version: one more with each append that changes state and each UpdateSession",
        },
        `version ${session.version}`,
      ),
    ),
    keys.length === 0 ? h("p", { class: "muted state-empty" }, "No keys (all deleted).") : null,
    ...GROUPS.map((group) => {
      const mine = keys.filter((k) => stateGroupOf(k) === group.name);
      if (mine.length === 0) return null;
      return h(
        "div",
        { class: `state-group state-${group.name}` },
        h("h3", {}, group.title, " ", h("span", { class: "muted" }, String(mine.length))),
        h(
          "dl",
          { class: "state-keys" },
          ...mine.flatMap((key) => [
            h("dt", { "data-key": key }, h("code", {}, key)),
            h("dd", { "data-key": key }, jsonView(state[key]!)),
          ]),
        ),
      );
    }),
  );
}
