/**
 * API keys in a JSON file, for the in-process and null stores (which keep no
 * state an operator could write to). Writes go to a temp file renamed over
 * the old one (mode 0600), so a reader never sees half a file; readers
 * re-read when the file's mtime or size changes, so keys created or revoked
 * by the CLI reach a running server.
 */
import { chmodSync, existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import type { ApiKeyRecord, ApiKeyStore } from "./api-keys.js";

interface KeyFile {
  keys: ApiKeyRecord[];
}

/** Keys kept in one JSON file (MEMORY_AUTH_KEYS_FILE). */
export class FileKeyStore implements ApiKeyStore {
  private cache?: { stamp: string; keys: ApiKeyRecord[] };

  constructor(readonly path: string) {}

  async create(record: ApiKeyRecord): Promise<void> {
    this.write([...this.read(), record]);
  }

  async get(id: string): Promise<ApiKeyRecord | undefined> {
    return this.read().find((k) => k.id === id);
  }

  async list(): Promise<ApiKeyRecord[]> {
    return [...this.read()].sort((a, b) => a.createdAt - b.createdAt);
  }

  async revoke(id: string, now = Date.now()): Promise<boolean> {
    const keys = this.read();
    const key = keys.find((k) => k.id === id);
    if (!key) return false;
    key.revokedAt ??= now;
    this.write(keys);
    return true;
  }

  async close(): Promise<void> {}

  private read(): ApiKeyRecord[] {
    if (!existsSync(this.path)) return [];
    const st = statSync(this.path);
    const stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
    if (this.cache?.stamp !== stamp) {
      const parsed = JSON.parse(readFileSync(this.path, "utf8")) as KeyFile;
      if (!Array.isArray(parsed.keys)) throw new Error(`${this.path}: not an Engram key file (no "keys" array)`);
      this.cache = { stamp, keys: parsed.keys };
    }
    return this.cache.keys.map((k) => ({ ...k, apps: [...k.apps] }));
  }

  private write(keys: ApiKeyRecord[]): void {
    const tmp = `${this.path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify({ keys } satisfies KeyFile, null, 2) + "\n", { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, this.path);
    this.cache = undefined;
  }
}
