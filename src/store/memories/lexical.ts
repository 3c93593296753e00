/**
 * The BM25 ranking the local and Redis memory drivers share (MiniSearch,
 * which scores with BM25+): what a memory contributes to the index, and how a
 * query is matched, written once so both drivers rank alike. PostgreSQL ranks
 * with its own full-text search instead (src/store/memories/postgres.ts).
 */
import MiniSearch, { type SearchOptions } from "minisearch";
import type { MemoryRecord } from "../types.js";

/** What BM25 indexes of a memory: its text, and its fact's words. */
export interface LexicalDocument {
  id: string;
  text: string;
  fact: string;
}

/** The index document of a memory. */
export function lexicalDocument(m: MemoryRecord): LexicalDocument {
  return { id: m.memoryId, text: m.text, fact: m.fact ? `${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : "" };
}

/** An empty index of memories by id. */
export function newLexicalIndex(): MiniSearch<LexicalDocument> {
  return new MiniSearch<LexicalDocument>({ fields: ["text", "fact"], storeFields: [], idField: "id" });
}

/** Exact terms, any of them (OR): BM25 does the weighting, as in context retrieval. */
export const LEXICAL_QUERY: SearchOptions = { prefix: false, fuzzy: false, combineWith: "OR" };
