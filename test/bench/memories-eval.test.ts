/**
 * The long-term memory evaluation set (bench/memories-eval/) is sound: every
 * label resolves to a memory the asker may see and that is valid at the
 * question's time, the set meets the size floor, and the validator
 * really rejects broken labels. recall@k scores supersession strictly.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  EVAL_MINIMUMS,
  QUESTION_CATEGORIES,
  allMemories,
  allQuestions,
  countByCategory,
  loadMemoriesEval,
  recallAtK,
  recallByCategory,
  validateMemoriesEval,
  type MemoriesEvalSet,
} from "../../bench/memories-eval/dataset.js";
import { lexicalReferenceRanking } from "../../bench/memories-eval/lexical-reference.js";

const committed = loadMemoriesEval();

/** A deep copy of the committed set to break on purpose. */
function copyOfSet(): MemoriesEvalSet {
  return structuredClone(committed);
}

function conversation(set: MemoriesEvalSet, id: string) {
  const found = set.conversations.find((c) => c.id.startsWith(id));
  if (!found) throw new Error(`no conversation ${id} in the set`);
  return found;
}

function question(set: MemoriesEvalSet, id: string) {
  const found = allQuestions(set).find((q) => q.id === id);
  if (!found) throw new Error(`no question ${id} in the set`);
  return found;
}

describe("the committed memory evaluation set", () => {
  it("passes every check of the validator", () => {
    expect(validateMemoriesEval(committed)).toEqual([]);
  });

  it("has at least 50 multi-session conversations, 200 questions and 20 questions per category", () => {
    expect(committed.conversations.length).toBeGreaterThanOrEqual(EVAL_MINIMUMS.conversations);
    expect(committed.conversations.every((c) => c.sessions.length >= 2)).toBe(true);
    expect(allQuestions(committed).length).toBeGreaterThanOrEqual(EVAL_MINIMUMS.questions);
    const counts = countByCategory(allQuestions(committed));
    for (const category of QUESTION_CATEGORIES)
      expect(counts[category], category).toBeGreaterThanOrEqual(EVAL_MINIMUMS.perCategory);
  });

  it("keeps memory ids unique across the whole set", () => {
    const ids = allMemories(committed).map((m) => m.memory_id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("matches the counts the README states", () => {
    const readme = readFileSync(new URL("../../bench/memories-eval/README.md", import.meta.url), "utf8");
    const questions = allQuestions(committed);
    expect(readme).toContain(`${committed.conversations.length} conversations`);
    expect(readme).toContain(`${committed.conversations.flatMap((c) => c.sessions).length} sessions`);
    expect(readme).toContain(`${questions.length} questions`);
    expect(readme).toContain(`${allMemories(committed).length} memories`);
    for (const [category, count] of Object.entries(countByCategory(questions)))
      expect(readme).toContain(`| \`${category}\` | ${count} |`);
  });
});

describe("validateMemoriesEval", () => {
  it("reports a gold id that resolves to no memory", () => {
    const set = copyOfSet();
    question(set, "c01-q1").gold.memory_ids = ["c01-m99"];
    expect(validateMemoriesEval(set)).toContain("question c01-q1: gold memory c01-m99 does not exist");
  });

  it("reports a gold memory outside the asker's scope (another user's memory)", () => {
    const set = copyOfSet();
    question(set, "c03-q5").gold.memory_ids = ["c01-m3"]; // Maria's diet, asked by Aisha
    expect(validateMemoriesEval(set)).toContain("question c03-q5: gold memory c01-m3 is outside the asker's scope");
  });

  it("reports a supersession question whose gold value has itself been superseded", () => {
    const set = copyOfSet();
    const q = question(set, "c01-q1");
    q.gold = { memory_ids: ["c01-m1"], not_valid_ids: ["c01-m7"] };
    const problems = validateMemoriesEval(set);
    expect(problems).toContain("question c01-q1: gold memory c01-m1 is not valid now (it has been superseded)");
    expect(problems).toContain("question c01-q1: not-valid memory c01-m7 is in fact valid now");
  });

  it("reports an as_of gold that was not yet true at as_of", () => {
    const set = copyOfSet();
    question(set, "c01-q2").as_of = "2025-01-01T00:00:00Z";
    expect(validateMemoriesEval(set)).toContain(
      "question c01-q2: gold memory c01-m1 is not valid as of 2025-01-01T00:00:00Z",
    );
  });

  it("reports events whose timestamps go backwards", () => {
    const set = copyOfSet();
    const session = conversation(set, "c02").sessions[1];
    session.events[1].timestamp = "2025-01-01T00:00:00Z";
    expect(
      validateMemoriesEval(set).some((p) =>
        p.startsWith(`session ${session.session_id} event 2: timestamp 2025-01-01T00:00:00Z is not after`),
      ),
    ).toBe(true);
  });

  it("reports a memory scoped to a user who is not in its conversation", () => {
    const set = copyOfSet();
    conversation(set, "c05").memories[0].scope.user_id = "u-nobody";
    expect(validateMemoriesEval(set)).toContain(
      "memory c05-m1: scope.user_id u-nobody is not among the conversation's user_ids",
    );
  });

  it("reports a shared question whose gold is not an app-wide memory from another conversation", () => {
    const set = copyOfSet();
    question(set, "c03-q6").gold.memory_ids = ["c03-m1"];
    expect(validateMemoriesEval(set)).toContain(
      "question c03-q6: a shared question needs an app-wide gold memory from another conversation",
    );
  });

  it("reports a set below the issue's floor", () => {
    const set = copyOfSet();
    set.conversations = set.conversations.slice(0, 3);
    set.appWideQuestions = [];
    const problems = validateMemoriesEval(set);
    expect(problems).toContain("the set has 3 conversations, fewer than 50");
    expect(problems.some((p) => /^the set has \d+ questions, fewer than 200$/.test(p))).toBe(true);
  });
});

describe("recallAtK", () => {
  const single = { memory_ids: ["m-rex"] };
  const multiHop = { memory_ids: ["m-sister", "m-allergy"] };
  const supersession = { memory_ids: ["m-window"], not_valid_ids: ["m-aisle"] };

  it("counts a question as recalled when its gold memory is in the top k", () => {
    expect(recallAtK([["a", "b", "c", "d", "m-rex"]], [single])).toBe(1);
  });

  it("misses a gold memory ranked just below k", () => {
    expect(recallAtK([["a", "b", "c", "d", "e", "m-rex"]], [single])).toBe(0);
    expect(recallAtK([["a", "b", "c", "d", "e", "m-rex"]], [single], 6)).toBe(1);
  });

  it("needs every gold memory of a multi-hop question in the top k", () => {
    expect(recallAtK([["m-sister", "x", "y"]], [multiHop])).toBe(0);
    expect(recallAtK([["m-allergy", "x", "m-sister"]], [multiHop])).toBe(1);
  });

  it("fails a supersession question when the superseded value is returned as valid, even ranked below the current one", () => {
    expect(recallAtK([["m-window", "x"]], [supersession])).toBe(1);
    expect(recallAtK([["m-window", "m-aisle"]], [supersession])).toBe(0);
    expect(recallAtK([["m-window", "a", "b", "c", "d", "e", "m-aisle"]], [supersession])).toBe(0);
  });

  it("averages over questions", () => {
    expect(
      recallAtK(
        [["m-rex"], ["nothing"], ["m-window"], ["m-sister", "m-allergy"]],
        [single, single, supersession, multiHop],
      ),
    ).toBe(0.75);
  });

  it("refuses ranked lists that do not pair up with the questions", () => {
    expect(() => recallAtK([["m-rex"]], [single, single])).toThrow(RangeError);
  });
});

describe("recallByCategory", () => {
  it("scores all questions and each category on its own", () => {
    const questions = [question(committed, "c01-q1"), question(committed, "c01-q2"), question(committed, "c01-q5")];
    const recall = recallByCategory(questions, [["c01-m7"], ["c01-m7"], ["c01-m6"]]);
    expect(recall.all).toBeCloseTo(2 / 3);
    expect(recall.supersession).toBe(1);
    expect(recall.as_of).toBe(0); // the later value answered a question about January
    expect(recall.paraphrase).toBe(1);
  });
});

describe("the lexical reference ranking (BM25 over exactly the right candidates)", () => {
  const recall = recallByCategory(allQuestions(committed), lexicalReferenceRanking(committed));

  it("finds most single facts asked in the memory's own words", () => {
    expect(recall.single).toBeGreaterThan(0.75);
  });

  it("is the figure the README states", () => {
    const readme = readFileSync(new URL("../../bench/memories-eval/README.md", import.meta.url), "utf8");
    const row = (["all", ...QUESTION_CATEGORIES] as const).map((c) => recall[c].toFixed(3)).join(" | ");
    expect(readme).toContain(`| ${row} |`);
  });

  it("misses many paraphrases and multi-hop questions, so the set does not reward word overlap alone", () => {
    expect(recall.paraphrase).toBeLessThan(0.6);
    expect(recall.multi_hop).toBeLessThan(0.6);
    expect(recall.all).toBeLessThan(0.8);
  });
});
