/**
 * The BM25 index cache of the Redis memory driver: an index is reused only
 * for exactly the documents it was built from.
 */
import { describe, expect, it } from "vitest";
import { LEXICAL_INDEX_CACHE_CHARS, LexicalIndexCache, LEXICAL_QUERY, type LexicalDocument } from "../../src/store/memories/lexical.js";

const docs: LexicalDocument[] = [
  { id: "a", text: "alpha apple", fact: "" },
  { id: "b", text: "beta banana", fact: "b likes banana" },
];

describe("LexicalIndexCache", () => {
  it("returns the kept index for the same documents, and ranks as a fresh one", () => {
    const cache = new LexicalIndexCache();
    const first = cache.indexOf(docs);
    expect(cache.indexOf(docs.map((d) => ({ ...d })))).toBe(first);
    expect(first.search("banana", LEXICAL_QUERY).map((h) => h.id)).toEqual(["b"]);
  });

  it("builds another index when any id, text, fact or the order differs, or a boundary moves", () => {
    const cache = new LexicalIndexCache();
    const first = cache.indexOf(docs);
    const variants: LexicalDocument[][] = [
      [{ ...docs[0], id: "c" }, docs[1]],
      [{ ...docs[0], text: "alpha apricot" }, docs[1]],
      [docs[0], { ...docs[1], fact: "" }],
      [docs[1], docs[0]],
      [docs[0]],
      // The same characters, split between text and fact differently.
      [docs[0], { ...docs[1], text: "beta bananab", fact: " likes banana" }],
    ];
    for (const variant of variants) expect(cache.indexOf(variant)).not.toBe(first);
    expect(cache.indexOf([docs[0], { ...docs[1], text: "gamma grape" }]).search("gamma", LEXICAL_QUERY).map((h) => h.id)).toEqual(["b"]);
  });

  it("keeps at most its character budget, the least recently used dropped first, and never a set larger than the budget", () => {
    const cache = new LexicalIndexCache();
    const big = (id: string): LexicalDocument[] => [{ id, text: "x".repeat(LEXICAL_INDEX_CACHE_CHARS / 2 - 100), fact: "" }];
    const one = cache.indexOf(big("one"));
    const two = cache.indexOf(big("two"));
    expect(cache.indexOf(big("one"))).toBe(one);
    cache.indexOf(big("three"));
    expect(cache.indexOf(big("one"))).toBe(one);
    expect(cache.indexOf(big("two"))).not.toBe(two);
    const huge: LexicalDocument[] = [{ id: "huge", text: "y".repeat(LEXICAL_INDEX_CACHE_CHARS + 1), fact: "" }];
    expect(cache.indexOf(huge)).not.toBe(cache.indexOf(huge));
  });
});
