/**
 * What a store throws at open when its backend answers but holds data this
 * release must not touch (a PostgreSQL schema migrated by a newer release).
 * Unlike an outage it does not pass by retrying, so start-up treats it like a
 * configuration error: ConnectingStore stops retrying and the server exits
 * saying why instead of serving (src/main.ts). A backend that refuses one of
 * the store's scripts is the other case it throws at open, a retried one.
 */

/** The backend holds data of a release this one cannot safely use; fatal at start-up, never retried. */
export class StoreIncompatibleError extends Error {
  override readonly name = "StoreIncompatibleError";
}

/**
 * The backend answers but refuses to load one of the store's scripts (Redis
 * cannot compile it, or its ACL forbids SCRIPT LOAD). Unlike
 * StoreIncompatibleError it is retried: the replica serves unready, saying
 * why on /readyz, in its log and in engram_store_script_refused, and becomes
 * ready by itself once the backend is replaced by one that accepts it.
 */
export class StoreScriptRefusedError extends Error {
  override readonly name = "StoreScriptRefusedError";

  constructor(
    /** The backend's name (redis). */
    readonly backend: string,
    /** The script's file name (append-12.lua). */
    readonly script: string,
    /** The backend's own error, verbatim. */
    readonly reason: string,
  ) {
    super(`${backend} refuses the script ${script}: ${reason}`);
  }
}
