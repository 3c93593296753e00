/**
 * What a memory contributes to a full-text index: its text and its fact's
 * words, through the shared analyzer. Every store indexes these terms, so a
 * memory is found by the same words whichever store keeps it.
 */
import type { MemoryRecord } from "../types.js";
import { analyze } from "./analyzer.js";

/** The analyzed terms of a memory's text and fact, in order (repeats kept). */
export function lexicalTerms(m: Pick<MemoryRecord, "text" | "fact">): string[] {
  return analyze(m.fact ? `${m.text}\n${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : m.text);
}
