import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { analyze, analyzedText, queryTerms } from "../../src/store/memories/analyzer.js";
import { allMemories, allQuestions, loadMemoriesEval } from "../../bench/memories-eval/dataset.js";

const stemEnglish: (word: string) => string = createRequire(import.meta.url)("wink-porter2-stemmer");

describe("the memory text analyzer", () => {
  it("stems English words so that a singular finds a plural", () => {
    expect(queryTerms("book a flight seat")).toEqual(["book", "flight", "seat"]);
    expect(analyze("Alice now prefers aisle seats on long flights")).toEqual(
      expect.arrayContaining(["seat", "flight", "prefer"]),
    );
  });

  it("folds NFD and NFC, compatibility forms and case to one term", () => {
    expect(analyze("Cafe\u0301")).toEqual(analyze("Caf\u00e9"));
    expect(analyze("ＡＢＣ ﬁle")).toEqual(analyze("abc FILE"));
    expect(analyze("STRASSE")).toEqual(analyze("straße"));
  });

  it("segments Japanese and Chinese into dictionary words", () => {
    expect(analyze("私の名前は太郎です")).toContain("太郎");
    expect(analyze("我喜欢吃苹果")).toEqual(["我", "喜欢", "吃", "苹果"]);
    expect(analyze("太郎abc")).toEqual(["太郎", "abc"]);
  });

  it("drops English stop words but keeps negations", () => {
    expect(analyze("the and of")).toEqual([]);
    expect(analyze("not")).toEqual(["not"]);
  });

  it("yields terms of letters, marks and digits only, so no engine splits them again", () => {
    for (const t of analyze("Don't e-mail Alice's v3.14 <b>x_y</b> naïve 😀 #tag"))
      expect(t).toMatch(/^[\p{L}\p{M}\p{N}]+$/u);
    expect(analyzedText("Don't e-mail")).toBe("dont e mail");
  });

  it("stems exactly as the Snowball English stemmer does, memo or not", () => {
    const words = ["running", "generously", "seats", "flights", "preferences", "university", "argued"];
    for (let round = 0; round < 2; round++) for (const w of words) expect(analyze(w)).toEqual([stemEnglish(w)]);
  });

  it("segments unspaced scripts exactly as ICU does", () => {
    const segmenter = new Intl.Segmenter("en", { granularity: "word" });
    for (const text of ["東京都に住んでいます", "ภาษาไทยง่ายนิดเดียว", "我喜欢吃苹果"]) {
      const icu = [...segmenter.segment(text)].filter((s) => s.isWordLike).map((s) => s.segment);
      expect(analyze(text)).toEqual(icu);
    }
  });

  it("gives ASCII text, on its shorter road, exactly the terms of the full analysis", () => {
    // A word outside ASCII at the end sends the same text down the full road; it adds its own term only.
    const set = loadMemoriesEval();
    const texts = [...allMemories(set).map((m) => m.text), ...allQuestions(set).map((q) => q.query)].filter(
      (t) => !/[\u0080-\uffff]/.test(t),
    );
    texts.push(
      "Don't e-mail Alice's v3.14 <b>x_y</b> #tag",
      "O'Neil's 'quoted' words' ' '' and\ttabs\n",
      "UPPER Case MiXeD 123abc ABC123",
    );
    expect(texts.length).toBeGreaterThan(500);
    for (const text of texts) {
      expect(analyze(`${text} über`), text).toEqual([...analyze(text), "über"]);
    }
  });
});
