/**
 * The API key store of a network backend (Redis, PostgreSQL) that was
 * unreachable at start-up: opened in the background with the same back-off as
 * the memory store (src/store/connecting.ts). Until it opens, every look-up
 * fails UNAVAILABLE, so a call with a key is refused as "try again", never
 * let through and never told its key is wrong.
 */
import { MemoryError } from "../errors.js";
import { openWithRetry } from "../store/connecting.js";
import type { ApiKeyRecord, ApiKeyStore } from "./api-keys.js";

/** Wraps a key store being opened in the background; see the file comment. */
export class ConnectingKeyStore implements ApiKeyStore {
  /** Opens the key store at once when its backend answers, else in the background. */
  static async open(
    open: () => Promise<ApiKeyStore>,
    failed: (err: unknown, attempt: number) => void,
  ): Promise<ApiKeyStore> {
    try {
      return await open();
    } catch (err) {
      failed(err, 0);
      return new ConnectingKeyStore(open, failed);
    }
  }

  private keys?: ApiKeyStore;
  private closed = false;
  /** Resolves once the key store is open; rejects only when closed before that. */
  readonly opened: Promise<ApiKeyStore>;

  constructor(open: () => Promise<ApiKeyStore>, failed: (err: unknown, attempt: number) => void) {
    this.opened = openWithRetry(open, failed, () => this.closed).then(async (keys) => {
      if (this.closed) {
        await keys.close();
        throw new MemoryError("UNAVAILABLE", "closed before the API key store was opened");
      }
      return (this.keys = keys);
    });
    this.opened.catch(() => {});
  }

  private get open(): ApiKeyStore {
    if (this.keys) return this.keys;
    throw new MemoryError("UNAVAILABLE", "the API key store is not connected yet; the server keeps retrying");
  }

  async create(record: ApiKeyRecord): Promise<void> {
    return this.open.create(record);
  }

  async get(id: string): Promise<ApiKeyRecord | undefined> {
    return this.open.get(id);
  }

  async list(): Promise<ApiKeyRecord[]> {
    return this.open.list();
  }

  async revoke(id: string, now?: number): Promise<boolean> {
    return this.open.revoke(id, now);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.keys?.close();
  }
}
