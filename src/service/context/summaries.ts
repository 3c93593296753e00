/**
 * Summaries: clients own the LLM, so they write the summary themselves as an
 * event of type `summary` whose metadata.covers = {from_seq, to_seq} names the
 * seqs it replaces. Context assembly then shows the summary, at the place of
 * the first covered event, instead of the covered events. Raw events stay in
 * the log; only contexts change.
 */
import { invalidArgument } from "../../errors.js";
import type { JsonObject, JsonValue } from "../../store/types.js";
import { EventType } from "../event-types.js";

/** An inclusive range of seqs. */
export interface SeqRange {
  fromSeq: number;
  toSeq: number;
}

function seqOf(v: JsonValue | undefined): number | undefined {
  // Numbers from JSON clients, strings from clients that write 64-bit ints the proto3-JSON way.
  const n = typeof v === "number" ? v : typeof v === "string" && /^[0-9]{1,16}$/.test(v) ? Number(v) : NaN;
  return Number.isSafeInteger(n) && n >= 1 ? n : undefined;
}

/** metadata.covers as a range, or undefined when absent or malformed. */
export function parseCovers(v: JsonValue | undefined): SeqRange | undefined {
  if (v === null || v === undefined || typeof v !== "object" || Array.isArray(v)) return undefined;
  const fromSeq = seqOf(v.from_seq);
  const toSeq = seqOf(v.to_seq);
  return fromSeq !== undefined && toSeq !== undefined && fromSeq <= toSeq ? { fromSeq, toSeq } : undefined;
}

/** At append: a summary's metadata.covers, when given, must be a valid range (INVALID_ARGUMENT naming it). */
export function checkSummaryCovers(field: string, eventType: string, metadata: JsonObject): void {
  if (eventType !== EventType.SUMMARY || metadata.covers === undefined) return;
  if (!parseCovers(metadata.covers)) {
    throw invalidArgument(
      `${field}.metadata.covers`,
      'must be {"from_seq": n, "to_seq": m} with integers 1 <= from_seq <= to_seq',
    );
  }
}

/** A summary event and the range it replaces, as resolved for one window. */
export interface ActiveSummary<E> {
  event: E;
  range: SeqRange;
}

/**
 * Decides which summaries of a window apply and which events they hide. The
 * newest summary wins: an older summary whose own seq falls in a newer one's
 * range was itself summarised. A range is clipped to seqs before the summary.
 */
export function resolveSummaries<E extends { seq: number }>(
  window: readonly E[],
  coversOf: (e: E) => SeqRange | undefined,
): { active: ActiveSummary<E>[]; hidden: Set<E> } {
  const active: ActiveSummary<E>[] = [];
  const hidden = new Set<E>();
  for (let i = window.length - 1; i >= 0; i--) {
    const e = window[i];
    const covers = coversOf(e);
    if (!covers) continue;
    if (active.some((s) => e.seq >= s.range.fromSeq && e.seq <= s.range.toSeq)) continue;
    const range = { fromSeq: covers.fromSeq, toSeq: Math.min(covers.toSeq, e.seq - 1) };
    if (range.fromSeq <= range.toSeq) active.push({ event: e, range });
  }
  if (active.length === 0) return { active, hidden };
  for (const e of window) {
    if (active.some((s) => e.seq >= s.range.fromSeq && e.seq <= s.range.toSeq)) hidden.add(e);
  }
  return { active, hidden };
}
