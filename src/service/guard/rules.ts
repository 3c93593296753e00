/**
 * Who may call what: each RPC's least role and how its tenant scope is
 * checked. A key is bound to one or more apps (or "*") and optionally one
 * user; a session outside the key's scope answers NOT_FOUND exactly as an
 * absent one would.
 */
import { MemoryService } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { ApiKeyRole, Principal } from "../../auth/api-keys.js";
import { MemoryError } from "../../errors.js";
import type { ScopeKind } from "../tenancy.js";

/** A MemoryService RPC by its local name ("addEvent"), as the contract declares it. */
export type RpcName = keyof typeof MemoryService.method;

/** The RPC the contract declares under this local name (an edge's descriptor walk or tool table). */
export function rpcName(name: string): RpcName {
  if (!Object.hasOwn(MemoryService.method, name)) throw new Error(`MemoryService has no method ${name}`);
  return name as RpcName;
}

/** True for the RPCs that answer with a server stream. */
export function isStreaming(method: RpcName): boolean {
  return MemoryService.method[method].methodKind === "server_streaming";
}

/** One RPC's rule: the least role a key needs, and its scope check. */
export interface MethodRule {
  role: ApiKeyRole;
  scope: ScopeKind;
}

const ROLE_RANK: Record<ApiKeyRole, number> = { read: 0, write: 1, admin: 2 };

/**
 * How each RPC is scoped. The table must name every RPC of the contract and
 * nothing else (`satisfies`), so an RPC added to the proto without a rule
 * fails the type check rather than being refused at run time.
 */
const RULES = {
  createSession: { role: "write", scope: "create" },
  getOrCreateSession: { role: "write", scope: "create" },
  getSession: { role: "read", scope: "session" },
  listSessions: { role: "read", scope: "listSessions" },
  deleteSession: { role: "write", scope: "session" },
  // Writes that may carry state deltas: checked as any session RPC, and app-wide state is out of a user-bound key's reach.
  updateSession: { role: "write", scope: "sessionState" },
  addEvent: { role: "write", scope: "sessionState" },
  addEvents: { role: "write", scope: "sessionState" },
  getSessionEvents: { role: "read", scope: "session" },
  listEvents: { role: "read", scope: "listEvents" },
  streamSessionEvents: { role: "read", scope: "session" },
  buildConversationContext: { role: "read", scope: "session" },
  // Store-wide totals only: no tenant's data.
  getStats: { role: "read", scope: "global" },
  // Removes any tenant's sessions: admin keys, over every app, or filtered to one of the key's apps (and its user).
  cleanup: { role: "admin", scope: "cleanup" },
  // Erases one user: admin keys over that app, or keys bound to that user (write at least).
  deleteUserData: { role: "write", scope: "erasure" },
  // Long-term memories: the service holds each memory to the key's scope itself (src/service/tenancy.ts).
  writeMemories: { role: "write", scope: "memories" },
  getMemory: { role: "read", scope: "memories" },
  searchMemories: { role: "read", scope: "memories" },
  listMemories: { role: "read", scope: "memories" },
  deleteMemories: { role: "write", scope: "memories" },
  watchMemories: { role: "read", scope: "memories" },
  searchEvents: { role: "read", scope: "memories" },
  // Recall reads the session (checked as any session RPC) and the memories its user may see.
  recall: { role: "read", scope: "session" },
  // Each watched session is checked as any session RPC; one outside the key's scope ends alone, NOT_FOUND, as an absent one.
  watchSessions: { role: "read", scope: "sessions" },
  countEventTokens: { role: "read", scope: "session" },
} as const satisfies Readonly<Record<RpcName, MethodRule>>;

/** The method's rule, once the key's role is enough for it; PERMISSION_DENIED otherwise. */
export function allowedRule(principal: Principal, method: RpcName): MethodRule {
  const rule: MethodRule = RULES[method];
  if (ROLE_RANK[principal.role] < ROLE_RANK[rule.role]) {
    throw new MemoryError(
      "PERMISSION_DENIED",
      `this API key's role (${principal.role}) may not call ${method}; it needs ${rule.role}`,
      {},
      {
        reason: "ROLE_NOT_ALLOWED",
        info: { role: principal.role, required_role: rule.role },
      },
    );
  }
  return rule;
}
