/**
 * The labelled evaluation set for long-term memory (bench/memories-eval/):
 * its types, a loader, a validator that proves every label is answerable,
 * and recall@k, the figure the memory bench reports for lexical and hybrid
 * ranking. Pure: no server, no store.
 */
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { MemorySchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";

/** Folder holding conversations/*.json and app-wide-questions.json. */
export const MEMORIES_EVAL_DIR = path.dirname(fileURLToPath(import.meta.url));

/** The kinds of question, each probing one retrieval skill (README.md explains each). */
export const QUESTION_CATEGORIES = ["supersession", "multi_hop", "as_of", "shared", "single", "paraphrase"] as const;

/** One of QUESTION_CATEGORIES. */
export type QuestionCategory = (typeof QUESTION_CATEGORIES)[number];

/** The issue's floor for the set: at least 50 conversations, 200 questions, 20 per category. */
export const EVAL_MINIMUMS = { conversations: 50, questions: 200, perCategory: 20 } as const;

/** Floors the validator enforces; tests of the validator itself may lower them. */
export interface EvalMinimums {
  conversations: number;
  questions: number;
  perCategory: number;
}

/** One event of a session, as AddEvent would store it. */
export interface EvalEvent {
  seq: number;
  role: "user" | "agent";
  text: string;
  /** ISO-8601 UTC; strictly increasing within a session and across a conversation's sessions. */
  timestamp: string;
}

/** One session of a conversation: one user talking to one agent. */
export interface EvalSession {
  session_id: string;
  user_id: string;
  agent_id: string;
  events: EvalEvent[];
}

/** Who a memory belongs to; an empty scope means shared by the whole app. */
export interface MemoryScope {
  user_id?: string;
  agent_id?: string;
  session_id?: string;
}

/** A subject–predicate–object triple, as an extraction step would produce. */
export interface EvalFact {
  subject: string;
  predicate: string;
  object: string;
}

/** A memory that the conversation yields: what an extraction step would write. */
export interface EvalMemory {
  /** Unique across the whole set. */
  memory_id: string;
  scope: MemoryScope;
  text: string;
  fact?: EvalFact;
  /** Writing a later memory with the same key in the same scope closes this one's validity. */
  key?: string;
  topics: string[];
  /** 0–1. */
  importance: number;
  valid_from: string;
  source: { session_id: string; from_seq: number; to_seq: number };
}

/** The scope a question is asked in: the search's scope filter. */
export type AskerScope = MemoryScope;

/** What a correct answer needs. */
export interface Gold {
  /** All of these must appear in the top k. */
  memory_ids: string[];
  /**
   * Memories that must not be returned as valid: values superseded by a gold
   * memory, or (with as_of) values that only became true after as_of.
   */
  not_valid_ids?: string[];
}

/** One labelled question. */
export interface EvalQuestion {
  id: string;
  /** The conversation the question is asked in; null for app-wide questions (then app_name says which app). */
  conversation: string | null;
  app_name?: string;
  asker: AskerScope;
  query: string;
  /** Ask what was true at this instant instead of now. */
  as_of?: string;
  category: QuestionCategory;
  gold: Gold;
}

/** One multi-session conversation with the memories it yields and the questions about it. */
export interface EvalConversation {
  id: string;
  app_name: string;
  domain: string;
  summary: string;
  user_ids: string[];
  agent_ids: string[];
  sessions: EvalSession[];
  memories: EvalMemory[];
  questions: EvalQuestion[];
}

/** A memory with the app and conversation it came from. */
export interface LoadedMemory extends EvalMemory {
  app_name: string;
  conversation: string;
}

/** The whole set, as loaded from disk. */
export interface MemoriesEvalSet {
  conversations: EvalConversation[];
  /** Questions asked outside any conversation (conversation: null). */
  appWideQuestions: EvalQuestion[];
}

/** Reads every conversations/*.json (in name order) and app-wide-questions.json under dir. */
export function loadMemoriesEval(dir: string = MEMORIES_EVAL_DIR): MemoriesEvalSet {
  const conversationsDir = path.join(dir, "conversations");
  const conversations = readdirSync(conversationsDir)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((name) => JSON.parse(readFileSync(path.join(conversationsDir, name), "utf8")) as EvalConversation);
  const appWide = JSON.parse(readFileSync(path.join(dir, "app-wide-questions.json"), "utf8")) as {
    questions: EvalQuestion[];
  };
  return { conversations, appWideQuestions: appWide.questions };
}

/** Every question of the set: each conversation's, then the app-wide ones. */
export function allQuestions(set: MemoriesEvalSet): EvalQuestion[] {
  return [...set.conversations.flatMap((c) => c.questions), ...set.appWideQuestions];
}

/** Every memory of the set, tagged with its app and conversation. */
export function allMemories(set: MemoriesEvalSet): LoadedMemory[] {
  return set.conversations.flatMap((c) => c.memories.map((m) => ({ ...m, app_name: c.app_name, conversation: c.id })));
}

/** The app a question searches: its conversation's, or its own app_name when app-wide. */
export function appOfQuestion(set: MemoriesEvalSet, question: EvalQuestion): string | undefined {
  if (question.conversation === null) return question.app_name;
  return set.conversations.find((c) => c.id === question.conversation)?.app_name;
}

/** Number of questions per category. */
export function countByCategory(questions: EvalQuestion[]): Record<QuestionCategory, number> {
  const counts = Object.fromEntries(QUESTION_CATEGORIES.map((c) => [c, 0])) as Record<QuestionCategory, number>;
  for (const q of questions) if (q.category in counts) counts[q.category] += 1;
  return counts;
}

const SCOPE_FIELDS = ["user_id", "agent_id", "session_id"] as const;

/**
 * Whether a search in `asker`'s scope may return the memory: same app, and
 * every field the memory is scoped by is one the asker has, with the same
 * value (so app-wide memories are visible to everyone in the app).
 */
export function isVisibleTo(memory: LoadedMemory, app: string, asker: AskerScope): boolean {
  if (memory.app_name !== app) return false;
  return SCOPE_FIELDS.every((field) => memory.scope[field] === undefined || memory.scope[field] === asker[field]);
}

/** The group whose members supersede each other: same app, same scope, same key (or, without a key, same subject + predicate). */
function supersessionGroup(memory: LoadedMemory): string | undefined {
  const key = memory.key ?? (memory.fact ? `${memory.fact.subject}\u0000${memory.fact.predicate}` : undefined);
  if (key === undefined) return undefined;
  const scope = SCOPE_FIELDS.map((field) => memory.scope[field] ?? "").join("\u0000");
  return `${memory.app_name}\u0000${scope}\u0000${key}`;
}

/**
 * When each memory stopped being valid, as the server's write path would set
 * it: the valid_from of the next memory in its supersession group. Memories
 * still valid now are absent from the map.
 */
export function invalidAtOf(memories: LoadedMemory[]): Map<string, string> {
  const groups = new Map<string, LoadedMemory[]>();
  for (const memory of memories) {
    const group = supersessionGroup(memory);
    if (group === undefined) continue;
    groups.set(group, [...(groups.get(group) ?? []), memory]);
  }
  const invalidAt = new Map<string, string>();
  for (const members of groups.values()) {
    members.sort((a, b) => Date.parse(a.valid_from) - Date.parse(b.valid_from));
    for (let i = 0; i + 1 < members.length; i++) invalidAt.set(members[i].memory_id, members[i + 1].valid_from);
  }
  return invalidAt;
}

/** Whether a memory was valid at `asOf` (ISO), or is valid now when asOf is undefined. */
export function isValidAt(memory: EvalMemory, invalidAt: string | undefined, asOf?: string): boolean {
  if (asOf === undefined) return invalidAt === undefined;
  const t = Date.parse(asOf);
  return Date.parse(memory.valid_from) <= t && (invalidAt === undefined || t < Date.parse(invalidAt));
}

/** A strict ISO-8601 UTC instant, as the set writes them (seconds, Z). */
function isTimestamp(value: unknown): value is string {
  return (
    typeof value === "string" && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(value) && !Number.isNaN(Date.parse(value))
  );
}

function isNonEmptyString(value: unknown): value is string {
  return typeof value === "string" && value.trim().length > 0;
}

/**
 * Every problem with the set, one sentence each naming the id at fault; an
 * empty list means every label is answerable as the README describes.
 */
export function validateMemoriesEval(set: MemoriesEvalSet, minimums: EvalMinimums = EVAL_MINIMUMS): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  const unique = (kind: string, id: unknown): void => {
    if (!isNonEmptyString(id)) problems.push(`a ${kind} has no id`);
    else if (seen.has(`${kind}:${id}`)) problems.push(`${kind} id ${id} is used twice`);
    else seen.add(`${kind}:${id}`);
  };

  const memories = allMemories(set);
  const memoryById = new Map(memories.map((m) => [m.memory_id, m]));
  const invalidAt = invalidAtOf(memories);
  const appUsers = new Map<string, Set<string>>();
  const appAgents = new Map<string, Set<string>>();

  for (const c of set.conversations) {
    unique("conversation", c.id);
    if (!isNonEmptyString(c.app_name)) problems.push(`conversation ${c.id}: app_name is empty`);
    if (!isNonEmptyString(c.domain)) problems.push(`conversation ${c.id}: domain is empty`);
    if (!Array.isArray(c.user_ids) || c.user_ids.length === 0) problems.push(`conversation ${c.id}: user_ids is empty`);
    if (!Array.isArray(c.agent_ids) || c.agent_ids.length === 0)
      problems.push(`conversation ${c.id}: agent_ids is empty`);
    for (const u of c.user_ids ?? []) appUsers.set(c.app_name, (appUsers.get(c.app_name) ?? new Set()).add(u));
    for (const a of c.agent_ids ?? []) appAgents.set(c.app_name, (appAgents.get(c.app_name) ?? new Set()).add(a));
    if (!Array.isArray(c.sessions) || c.sessions.length < 2)
      problems.push(`conversation ${c.id}: needs at least 2 sessions`);

    let previous: string | undefined;
    for (const s of c.sessions ?? []) {
      unique("session", s.session_id);
      if (!c.user_ids.includes(s.user_id))
        problems.push(`session ${s.session_id}: user_id ${s.user_id} is not among the conversation's user_ids`);
      if (!c.agent_ids.includes(s.agent_id))
        problems.push(`session ${s.session_id}: agent_id ${s.agent_id} is not among the conversation's agent_ids`);
      if (!Array.isArray(s.events) || s.events.length === 0) problems.push(`session ${s.session_id}: has no events`);
      (s.events ?? []).forEach((e, i) => {
        const at = `session ${s.session_id} event ${i + 1}`;
        if (e.seq !== i + 1) problems.push(`${at}: seq is ${e.seq}, expected ${i + 1}`);
        if (e.role !== "user" && e.role !== "agent")
          problems.push(`${at}: role ${String(e.role)} is neither user nor agent`);
        if (!isNonEmptyString(e.text)) problems.push(`${at}: text is empty`);
        if (!isTimestamp(e.timestamp))
          problems.push(`${at}: timestamp ${String(e.timestamp)} is not an ISO-8601 UTC instant`);
        else if (previous !== undefined && Date.parse(e.timestamp) <= Date.parse(previous)) {
          problems.push(`${at}: timestamp ${e.timestamp} is not after the previous event's ${previous}`);
        }
        if (isTimestamp(e.timestamp)) previous = e.timestamp;
      });
    }

    for (const m of c.memories ?? []) {
      unique("memory", m.memory_id);
      const at = `memory ${m.memory_id}`;
      if (!isNonEmptyString(m.text)) problems.push(`${at}: text is empty`);
      if (typeof m.importance !== "number" || m.importance < 0 || m.importance > 1)
        problems.push(`${at}: importance ${m.importance} is outside 0–1`);
      if (!Array.isArray(m.topics)) problems.push(`${at}: topics is not a list`);
      if (m.fact && ![m.fact.subject, m.fact.predicate, m.fact.object].every(isNonEmptyString))
        problems.push(`${at}: fact has an empty part`);
      for (const field of Object.keys(m.scope ?? {})) {
        if (!(SCOPE_FIELDS as readonly string[]).includes(field))
          problems.push(`${at}: scope has unknown field ${field}`);
      }
      if (m.scope?.user_id !== undefined && !c.user_ids.includes(m.scope.user_id))
        problems.push(`${at}: scope.user_id ${m.scope.user_id} is not among the conversation's user_ids`);
      if (m.scope?.agent_id !== undefined && !c.agent_ids.includes(m.scope.agent_id))
        problems.push(`${at}: scope.agent_id ${m.scope.agent_id} is not among the conversation's agent_ids`);
      if (m.scope?.session_id !== undefined && !c.sessions.some((s) => s.session_id === m.scope.session_id)) {
        problems.push(`${at}: scope.session_id ${m.scope.session_id} is not a session of ${c.id}`);
      }
      const source = c.sessions.find((s) => s.session_id === m.source?.session_id);
      if (!source) {
        problems.push(`${at}: source.session_id ${m.source?.session_id} is not a session of ${c.id}`);
        continue;
      }
      const { from_seq: from, to_seq: to } = m.source;
      if (!(Number.isInteger(from) && Number.isInteger(to) && from >= 1 && from <= to && to <= source.events.length)) {
        problems.push(
          `${at}: source seq range ${from}–${to} is not within ${source.session_id}'s ${source.events.length} events`,
        );
      } else if (!isTimestamp(m.valid_from) || Date.parse(m.valid_from) < Date.parse(source.events[to - 1].timestamp)) {
        problems.push(
          `${at}: valid_from ${m.valid_from} is before the event it was extracted from (${source.events[to - 1].timestamp})`,
        );
      }
    }
  }

  const conversationById = new Map(set.conversations.map((c) => [c.id, c]));
  for (const q of allQuestions(set)) {
    unique("question", q.id);
    const at = `question ${q.id}`;
    if (q.conversation !== null && !conversationById.has(q.conversation)) {
      problems.push(`${at}: conversation ${q.conversation} does not exist`);
      continue;
    }
    const app = appOfQuestion(set, q);
    if (app === undefined || !appUsers.has(app)) {
      problems.push(`${at}: app ${String(app)} has no conversations`);
      continue;
    }
    if (!(QUESTION_CATEGORIES as readonly string[]).includes(q.category))
      problems.push(`${at}: category ${q.category} is unknown`);
    if (!isNonEmptyString(q.query)) problems.push(`${at}: query is empty`);
    if (q.as_of !== undefined && !isTimestamp(q.as_of))
      problems.push(`${at}: as_of ${q.as_of} is not an ISO-8601 UTC instant`);
    if (q.asker.user_id !== undefined && !appUsers.get(app)!.has(q.asker.user_id))
      problems.push(`${at}: asker user_id ${q.asker.user_id} is not a user of ${app}`);
    if (q.asker.agent_id !== undefined && !appAgents.get(app)!.has(q.asker.agent_id))
      problems.push(`${at}: asker agent_id ${q.asker.agent_id} is not an agent of ${app}`);

    const gold = q.gold?.memory_ids ?? [];
    if (gold.length === 0) problems.push(`${at}: gold.memory_ids is empty`);
    const resolved: LoadedMemory[] = [];
    for (const id of gold) {
      const memory = memoryById.get(id);
      if (!memory) {
        problems.push(`${at}: gold memory ${id} does not exist`);
        continue;
      }
      resolved.push(memory);
      if (!isVisibleTo(memory, app, q.asker)) problems.push(`${at}: gold memory ${id} is outside the asker's scope`);
      if (!isValidAt(memory, invalidAt.get(id), q.as_of)) {
        problems.push(
          `${at}: gold memory ${id} is not valid ${q.as_of ? `as of ${q.as_of}` : "now (it has been superseded)"}`,
        );
      }
    }
    for (const id of q.gold?.not_valid_ids ?? []) {
      const memory = memoryById.get(id);
      if (!memory) problems.push(`${at}: not-valid memory ${id} does not exist`);
      else if (!isVisibleTo(memory, app, q.asker))
        problems.push(`${at}: not-valid memory ${id} is outside the asker's scope, so it tests nothing`);
      else if (isValidAt(memory, invalidAt.get(id), q.as_of))
        problems.push(`${at}: not-valid memory ${id} is in fact valid ${q.as_of ? `as of ${q.as_of}` : "now"}`);
      else if (gold.includes(id)) problems.push(`${at}: memory ${id} is both gold and not valid`);
    }

    switch (q.category) {
      case "supersession": {
        const groups = new Set(resolved.map((m) => supersessionGroup(m)));
        const superseded = (q.gold.not_valid_ids ?? []).map((id) => memoryById.get(id)).filter((m) => m !== undefined);
        if (superseded.length === 0) problems.push(`${at}: a supersession question names no superseded memory`);
        for (const m of superseded)
          if (!groups.has(supersessionGroup(m)))
            problems.push(`${at}: ${m.memory_id} is not superseded by any gold memory`);
        if (q.as_of !== undefined) problems.push(`${at}: a supersession question asks about now, so it has no as_of`);
        break;
      }
      case "as_of":
        if (q.as_of === undefined) problems.push(`${at}: an as_of question has no as_of`);
        break;
      case "multi_hop":
        if (new Set(resolved.map((m) => m.source.session_id)).size < 2)
          problems.push(`${at}: a multi_hop question needs gold memories from at least 2 sessions`);
        break;
      case "shared":
        if (!resolved.some((m) => Object.keys(m.scope).length === 0 && m.conversation !== q.conversation)) {
          problems.push(`${at}: a shared question needs an app-wide gold memory from another conversation`);
        }
        break;
    }
  }

  const questions = allQuestions(set);
  if (set.conversations.length < minimums.conversations)
    problems.push(`the set has ${set.conversations.length} conversations, fewer than ${minimums.conversations}`);
  if (questions.length < minimums.questions)
    problems.push(`the set has ${questions.length} questions, fewer than ${minimums.questions}`);
  for (const [category, count] of Object.entries(countByCategory(questions))) {
    if (count < minimums.perCategory)
      problems.push(`category ${category} has ${count} questions, fewer than ${minimums.perCategory}`);
  }
  return problems;
}

/**
 * Whether one ranked answer is correct at k: every gold memory is in the top
 * k, and no not-valid memory appears anywhere in `ranked` (the list is what
 * the search returned as valid, best first).
 */
export function isHitAtK(ranked: readonly string[], gold: Gold, k: number): boolean {
  const top = new Set(ranked.slice(0, k));
  return gold.memory_ids.every((id) => top.has(id)) && !(gold.not_valid_ids ?? []).some((id) => ranked.includes(id));
}

/** recall@k over a question list: the share of questions answered correctly (isHitAtK); ranked[i] answers gold[i]. */
export function recallAtK(ranked: readonly (readonly string[])[], gold: readonly Gold[], k = 5): number {
  if (ranked.length !== gold.length)
    throw new RangeError(`recallAtK: ${ranked.length} ranked lists for ${gold.length} questions`);
  if (gold.length === 0) return 0;
  return gold.filter((g, i) => isHitAtK(ranked[i], g, k)).length / gold.length;
}

/** recall@k over all questions and per category; ranked[i] answers questions[i]. */
export function recallByCategory(
  questions: readonly EvalQuestion[],
  ranked: readonly (readonly string[])[],
  k = 5,
): Record<QuestionCategory | "all", number> {
  const result = {
    all: recallAtK(
      ranked,
      questions.map((q) => q.gold),
      k,
    ),
  } as Record<QuestionCategory | "all", number>;
  for (const category of QUESTION_CATEGORIES) {
    const picked = questions.flatMap((q, i) => (q.category === category ? [i] : []));
    result[category] = recallAtK(
      picked.map((i) => ranked[i]),
      picked.map((i) => questions[i].gold),
      k,
    );
  }
  return result;
}

/** The Memory message of an evaluation-set memory, as WriteMemories takes it. */
export function wireMemory(m: LoadedMemory): MessageInitShape<typeof MemorySchema> {
  return {
    memoryId: m.memory_id,
    appName: m.app_name,
    userId: m.scope.user_id,
    agentId: m.scope.agent_id,
    sessionId: m.scope.session_id,
    text: m.text,
    fact: m.fact,
    key: m.key ?? "",
    topics: m.topics,
    importance: m.importance,
    validFrom: timestampFromMs(Date.parse(m.valid_from)),
    source: { sessionId: m.source.session_id, fromSeq: BigInt(m.source.from_seq), toSeq: BigInt(m.source.to_seq) },
  };
}
