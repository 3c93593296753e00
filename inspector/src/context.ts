/**
 * The context panel, after Letta's context window view: BuildConversationContext
 * asked with a query, a token budget, section budgets and a tokenizer, and
 * its answer broken down by section (tokens, events in and out, whether the
 * query ranked it), with what was left out and why, then the messages the
 * model would get.
 */
import type { BuildConversationContextResponse } from "@engram/gen";
import { memory } from "./api";
import { h, replaceChildren } from "./dom";
import { jsonView } from "./events";
import { errorBox } from "./views";

/** "messages=1000, findings=300" (or one per line) as section budgets; a bad entry names itself. */
export function parseSectionBudgets(text: string): Record<string, number> {
  const budgets: Record<string, number> = {};
  for (const entry of text
    .split(/[\n,]+/)
    .map((e) => e.trim())
    .filter(Boolean)) {
    const m = /^([^=\s]+)\s*=\s*(\d+)$/.exec(entry);
    if (!m) throw new Error(`section budget "${entry}": write it as section=tokens`);
    budgets[m[1]!] = Number(m[2]);
  }
  return budgets;
}

/** Why events were left out, in words, from the answer's counts. */
function reasons(
  res: BuildConversationContextResponse,
  budget: number,
  sectionBudgets: Record<string, number>,
): string[] {
  const out: string[] = [];
  if (res.eventsSummarized > 0)
    out.push(`${res.eventsSummarized} events are covered by a summary in the context, so they are left out.`);
  for (const s of res.sections) {
    if (s.retrievalUsed)
      out.push(
        `${s.name}: ranked by relevance to the query (it held more items than the retrieval threshold); the best that fit were kept.`,
      );
    if (s.eventsDropped > 0) {
      const sectionBudget = sectionBudgets[s.name];
      const why =
        sectionBudget !== undefined
          ? `its budget of ${sectionBudget} tokens is spent (${s.tokensUsed} used)`
          : budget > 0 && res.tokensUsed + 50 >= budget
            ? `the total budget of ${budget} tokens is spent (lower-priority sections are trimmed first)`
            : "a tool call without its result, an unknown type, or over a budget";
      out.push(`${s.name}: ${s.eventsDropped} event${s.eventsDropped === 1 ? "" : "s"} dropped — ${why}.`);
    }
  }
  return out;
}

/** The context panel of one session. */
export function contextPanel(sessionId: string): HTMLElement {
  const budget = h("input", {
    type: "number",
    min: 0,
    step: 1,
    value: 2000,
    name: "budget",
    "aria-label": "token budget",
  });
  const maxEvents = h("input", {
    type: "number",
    min: 0,
    step: 1,
    value: 0,
    name: "max-events",
    "aria-label": "max events",
  });
  const queryInput = h("input", {
    type: "search",
    name: "query",
    placeholder: "rank by (optional)",
    "aria-label": "query",
  });
  const tokenizer = h(
    "select",
    { name: "tokenizer", "aria-label": "tokenizer" },
    ...["o200k_base", "cl100k_base", "chars4"].map((t) => h("option", { value: t }, t)),
  );
  const sectionBudgets = h("input", {
    name: "section-budgets",
    placeholder: "messages=1000, findings=300",
    "aria-label": "section budgets",
    spellcheck: "false",
  });
  const out = h("div", { class: "context-out" });
  const form = h(
    "form",
    {
      class: "context-form",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        replaceChildren(out, h("p", { class: "muted" }, "Building…"));
        let budgets: Record<string, number>;
        try {
          budgets = parseSectionBudgets(sectionBudgets.value);
        } catch (err) {
          replaceChildren(out, h("p", { class: "error", role: "alert" }, (err as Error).message));
          return;
        }
        try {
          const total = Number(budget.value) || 0;
          const res = await memory.buildConversationContext({
            sessionId,
            tokenBudget: total,
            maxEvents: Number(maxEvents.value) || 0,
            query: queryInput.value.trim(),
            tokenizer: tokenizer.value,
            sectionBudgets: budgets,
          });
          const why = reasons(res, total, budgets);
          replaceChildren(
            out,
            h(
              "p",
              { class: "context-summary" },
              `${res.eventsIncluded} events included, ${res.eventsDropped} dropped, ${res.eventsSummarized} summarized` +
                (res.tokenizer ? `, ${res.tokensUsed} tokens (${res.tokenizer})` : "") +
                (total ? ` of ${total}` : "") +
                (res.retrievalUsed ? ", ranked by the query" : ""),
            ),
            total
              ? h("meter", {
                  class: "budget-meter",
                  min: 0,
                  max: total,
                  value: res.tokensUsed,
                  "aria-label": "tokens used of the budget",
                })
              : null,
            h("h3", {}, "By section"),
            h(
              "div",
              { class: "table-scroll" },
              h(
                "table",
                { class: "sections" },
                h(
                  "thead",
                  {},
                  h(
                    "tr",
                    {},
                    ...["Section", "Tokens", "Budget", "In", "Dropped", "Retrieval"].map((t) =>
                      h("th", { scope: "col", class: t === "Section" ? undefined : "num" }, t),
                    ),
                  ),
                ),
                h(
                  "tbody",
                  {},
                  ...res.sections.map((s) =>
                    h(
                      "tr",
                      { "data-section": s.name },
                      h("td", {}, s.name),
                      h("td", { class: "num tokens" }, String(s.tokensUsed)),
                      h("td", { class: "num" }, budgets[s.name] !== undefined ? String(budgets[s.name]) : "—"),
                      h("td", { class: "num" }, String(s.eventsIncluded)),
                      h("td", { class: "num" }, String(s.eventsDropped)),
                      h("td", { class: "num" }, s.retrievalUsed ? "query" : "—"),
                    ),
                  ),
                ),
              ),
            ),
            why.length ? h("ul", { class: "context-reasons" }, ...why.map((r) => h("li", {}, r))) : null,
            h("h3", {}, `Messages (${res.messages.length})`),
            h(
              "ol",
              { class: "messages" },
              ...res.messages.map((m) =>
                h(
                  "li",
                  { class: `msg role-${m.role.replace(/[^a-z]/g, "")}` },
                  h("span", { class: "role" }, m.role + (m.name ? ` (${m.name})` : "")),
                  m.content ? h("div", { class: "text" }, m.content) : null,
                  ...m.contentParts
                    .filter((p) => p.type === "image_url" && p.imageUrl?.url.startsWith("data:image/"))
                    .map((p) =>
                      h("img", { class: "context-image", src: p.imageUrl!.url, alt: "image in the message" }),
                    ),
                  m.toolCalls.length
                    ? jsonView(
                        m.toolCalls.map((c) => ({
                          id: c.id,
                          name: c.function?.name ?? "",
                          arguments: c.function?.arguments ?? "",
                        })),
                        "tool_calls",
                      )
                    : null,
                  m.toolCallId ? h("span", { class: "muted" }, ` answers ${m.toolCallId}`) : null,
                ),
              ),
            ),
            h("h3", {}, "Text"),
            h("pre", { class: "context-text" }, res.text || "(empty)"),
          );
        } catch (err) {
          replaceChildren(out, errorBox(err));
        }
      },
    },
    h("label", {}, "Token budget ", budget),
    h("label", {}, "Max events ", maxEvents),
    h("label", {}, "Tokenizer ", tokenizer),
    h("label", { class: "wide" }, "Query ", queryInput),
    h("label", { class: "wide" }, "Section budgets ", sectionBudgets),
    h("button", { type: "submit" }, "Build context"),
  );
  return h("section", { class: "panel context" }, h("h2", {}, "Context for the next model call"), form, out);
}
