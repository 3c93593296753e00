/**
 * What a memory contributes to a full-text index: its text and its fact's
 * words, through the shared analyzer. The local driver indexes these terms
 * itself (src/store/inverted-index.ts). The MiniSearch helpers below serve
 * the Redis driver's candidate windows only.
 */
import { hash } from "node:crypto";
import { LRUCache } from "lru-cache";
import MiniSearch, { type SearchOptions } from "minisearch";
import type { MemoryRecord } from "../types.js";
import { analyze } from "./analyzer.js";

/** The analyzed terms of a memory's text and fact, in order (repeats kept). */
export function lexicalTerms(m: Pick<MemoryRecord, "text" | "fact">): string[] {
  return analyze(m.fact ? `${m.text}\n${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : m.text);
}

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

/**
 * Characters of text (ids, texts and facts) the indexes a LexicalIndexCache
 * keeps were built from, at most, all together. MiniSearch's index took ~18
 * bytes of heap per character here (3.6 MB for 2,000 memories of 12 words),
 * so this holds ~36 MB: ten such candidate sets, or two of 2,000 memories of
 * 500 characters.
 */
export const LEXICAL_INDEX_CACHE_CHARS = 2 * 1024 * 1024;

/**
 * BM25 indexes of candidate sets, by their content. The Redis driver ranks
 * the newest memories of a scope, read afresh at every search; building
 * MiniSearch's index of 2,000 of them was more than half of a search's CPU
 * (53-73 ms a search before, 26-28 ms with an index kept), and a scope
 * searched again while nothing in its window changed gets the same index
 * back. The key is a hash of every document's id, text and fact, in order,
 * so an index is only reused for exactly the documents it was built from: a
 * search ranks as if it had built its own.
 */
export class LexicalIndexCache {
  private readonly indexes = new LRUCache<string, MiniSearch<LexicalDocument>>({ maxSize: LEXICAL_INDEX_CACHE_CHARS });

  /** The index of these documents, built now or kept from an earlier call with the same ones. */
  indexOf(documents: readonly LexicalDocument[]): MiniSearch<LexicalDocument> {
    return this.keyedIndexOf(documents).index;
  }

  /** The index kept under a key keyedIndexOf gave, while it is kept. */
  kept(key: string): MiniSearch<LexicalDocument> | undefined {
    return this.indexes.get(key);
  }

  /** indexOf, with the key it is kept under (for a caller that can tell the same documents apart more cheaply than hashing them). */
  keyedIndexOf(documents: readonly LexicalDocument[]): { key: string; index: MiniSearch<LexicalDocument> } {
    const parts: string[] = [];
    for (const d of documents) parts.push(`${d.id.length}:${d.id}${d.text.length}:${d.text}${d.fact.length}:${d.fact}`);
    // Each part length-prefixed, so no text can imitate a boundary.
    const content = parts.join("");
    const key = hash("sha256", content, "base64");
    const kept = this.indexes.get(key);
    if (kept) return { key, index: kept };
    const index = newLexicalIndex();
    index.addAll(documents);
    // A set larger than the whole budget is not kept (lru-cache refuses it).
    this.indexes.set(key, index, { size: Math.max(1, content.length) });
    return { key, index };
  }
}
