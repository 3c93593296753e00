/**
 * What a store throws at open when its backend answers but holds data this
 * release must not touch (a PostgreSQL schema migrated by a newer release).
 * Unlike an outage it does not pass by retrying, so start-up treats it like a
 * configuration error: ConnectingStore stops retrying and the server exits
 * saying why instead of serving (src/main.ts).
 */

/** The backend holds data of a release this one cannot safely use; fatal at start-up, never retried. */
export class StoreIncompatibleError extends Error {
  override readonly name = "StoreIncompatibleError";
}
