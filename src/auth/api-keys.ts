/**
 * API keys: what a key is, how it is made, and how a presented key is checked.
 *
 * A key reads `ek_<id>_<secret>`: `id` (12 hex chars) is public and only
 * finds the record; `secret` is 32 random bytes (256 bits, base64url). Only
 * SHA-256 of the whole key is stored: with that much entropy a slow password
 * hash buys nothing, and a leaked store reveals no usable key. The check
 * compares hashes in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { MemoryError } from "../errors.js";

/** What a key may do: read < write < admin. */
export type ApiKeyRole = "read" | "write" | "admin";

/** Every role, weakest first. */
export const API_KEY_ROLES: readonly ApiKeyRole[] = ["read", "write", "admin"];

/** Stands for "every app" in a key's app list (admin keys). */
export const ANY_APP = "*";

/** A stored key: never the key itself, only its hash and its scope. */
export interface ApiKeyRecord {
  /** Public id: the `<id>` part of the key. */
  id: string;
  /** SHA-256 of the whole key, hex. */
  hash: string;
  role: ApiKeyRole;
  /** Apps the key may touch; `["*"]` means every app. */
  apps: string[];
  /** When set, the key only sees sessions of this user. */
  userId?: string;
  /** A note for operators (who holds the key). */
  name?: string;
  /** Calls per second allowed to this key; 0 or absent: the server default. */
  rateLimit?: number;
  createdAt: number;
  /** When set, the key was revoked at this time and no longer authenticates. */
  revokedAt?: number;
}

/** Who is calling: an authenticated key's scope. */
export interface Principal {
  keyId: string;
  role: ApiKeyRole;
  /** Apps in scope; empty never happens; `["*"]` means every app. */
  apps: readonly string[];
  userId?: string;
  rateLimit?: number;
}

const KEY_PATTERN = /^ek_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$/;

/** SHA-256 of a key, hex. */
export function hashApiKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

/** A new random key and the record to store for it. */
export function generateApiKey(
  scope: Pick<ApiKeyRecord, "role" | "apps" | "userId" | "name" | "rateLimit">,
  now = Date.now(),
): {
  key: string;
  record: ApiKeyRecord;
} {
  const id = randomBytes(6).toString("hex");
  const key = `ek_${id}_${randomBytes(32).toString("base64url")}`;
  return { key, record: { id, hash: hashApiKey(key), createdAt: now, ...scope } };
}

/** The public id of a well-formed key, or undefined. */
export function apiKeyId(key: string): string | undefined {
  return KEY_PATTERN.exec(key)?.[1];
}

/** True when `key` hashes to the record's hash (constant-time compare). */
export function keyMatches(key: string, record: ApiKeyRecord): boolean {
  const expected = Buffer.from(record.hash, "hex");
  const actual = createHash("sha256").update(key).digest();
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}

/** UNAUTHENTICATED with a message that never echoes the key. */
export function unauthenticated(problem: string): MemoryError {
  return new MemoryError("UNAUTHENTICATED", `authorization: ${problem}`, {}, { reason: "API_KEY_INVALID" });
}

/** The key carried by an `authorization: Bearer <key>` header value. */
export function bearerKey(header: string | undefined): string {
  if (!header) throw unauthenticated("missing; send `authorization: Bearer <api key>`");
  const match = /^Bearer +(\S+) *$/i.exec(header);
  if (!match) throw unauthenticated("expected `Bearer <api key>`");
  return match[1];
}

/** Checks a key's scope before it is stored. */
export function validateScope(scope: Pick<ApiKeyRecord, "role" | "apps" | "userId" | "rateLimit">): void {
  if (!API_KEY_ROLES.includes(scope.role))
    throw new Error(`role: expected one of ${API_KEY_ROLES.join(", ")}, got ${JSON.stringify(scope.role)}`);
  if (scope.apps.length === 0) throw new Error("app: at least one app (or * for every app) is required");
  for (const app of scope.apps) {
    if (app.length === 0 || Buffer.byteLength(app) > 256 || app.includes("\0"))
      throw new Error(`app: ${JSON.stringify(app)} is not a valid app_name`);
  }
  if (scope.apps.includes(ANY_APP) && scope.apps.length > 1)
    throw new Error("app: * already means every app; give it alone");
  if (
    scope.userId !== undefined &&
    (scope.userId.length === 0 || Buffer.byteLength(scope.userId) > 256 || scope.userId.includes("\0"))
  ) {
    throw new Error(`user: ${JSON.stringify(scope.userId)} is not a valid user_id`);
  }
  if (scope.rateLimit !== undefined && !(Number.isInteger(scope.rateLimit) && scope.rateLimit >= 0)) {
    throw new Error("rate-limit: must be a whole number of calls per second (0: the server default)");
  }
}

/** Where keys are kept: the configured backend (a file for the in-process store). */
export interface ApiKeyStore {
  /** Stores a new key record. */
  create(record: ApiKeyRecord): Promise<void>;
  /** The record with this public id (revoked ones too), or undefined. */
  get(id: string): Promise<ApiKeyRecord | undefined>;
  /** Every record, oldest first. */
  list(): Promise<ApiKeyRecord[]>;
  /** Marks the key revoked; false when there is no such key. */
  revoke(id: string, now?: number): Promise<boolean>;
  close(): Promise<void>;
}
