/**
 * What the session and the long-term memory contracts both speak: stored
 * JSON and the call a store method serves.
 */

/** Any JSON value, as stored. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object, as stored. */
export type JsonObject = { [key: string]: JsonValue };

/**
 * What a store method may be told of the call it serves, passed explicitly
 * by the service as the last argument of every method that waits on a
 * backend. A driver that can bound its backend work (PostgreSQL) stops
 * waiting at the deadline and frees what it holds; the others may ignore it.
 * Stream reads (the stream hub, shared by every subscriber of a session) and
 * start-up or background work carry none.
 */
export interface StoreCall {
  /** Epoch ms by which the caller wants its answer (the client's gRPC deadline or Connect timeout); absent: only the driver's own timeouts bound it. */
  readonly deadline?: number;
  /**
   * The incarnation (SessionRecord.incarnation) of the session the call
   * names, as the caller's scope check saw it: an operation on one session
   * answers as if the session were absent (getSession undefined, the others
   * NOT_FOUND, deleteSession included) and changes nothing when the id now
   * names another incarnation, checked in the same atomic step as the
   * operation. Between a scoped key's check and its call the session can be
   * deleted and created again by another tenant. Absent: any incarnation (no
   * check, no cost); operations on no single session ignore it.
   */
  readonly expectedIncarnation?: string;
}
