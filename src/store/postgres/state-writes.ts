/** Session, user and app state written by the PostgreSQL driver (UpdateSession, and appends carrying state deltas). */
import type pg from "pg";
import { applyChanges, checkStateCaps, type ScopedChanges } from "../state.js";
import type { JsonObject, SessionRecord } from "../types.js";
import type { SessionStatements } from "./statements.js";

/**
 * Applies state changes to a session locked by this transaction, its
 * user's and its app's state (locked in that order), all or none: each is
 * checked against the caps of src/store/state.ts before anything is
 * written. Bumps the session's version.
 */
export async function writeState(
  client: pg.PoolClient,
  sql: SessionStatements,
  session: SessionRecord,
  changes: ScopedChanges,
): Promise<void> {
  const { appName, userId } = session;
  let user: JsonObject | undefined;
  let app: JsonObject | undefined;
  if (changes.user.size > 0) {
    await client.query(sql.createUserState, [appName, userId]);
    const { rows } = await client.query<{ state: JsonObject }>(sql.lockUserState, [appName, userId]);
    user = applyChanges(rows[0].state, changes.user);
    checkStateCaps("state_delta", "user", user);
  }
  if (changes.app.size > 0) {
    await client.query(sql.createAppState, [appName]);
    const { rows } = await client.query<{ state: JsonObject }>(sql.lockAppState, [appName]);
    app = applyChanges(rows[0].state, changes.app);
    checkStateCaps("state_delta", "app", app);
  }
  const own = applyChanges(session.state, changes.session);
  checkStateCaps("state_delta", "session", own);
  if (user) await client.query(sql.updateUserState, [appName, userId, JSON.stringify(user)]);
  if (app) await client.query(sql.updateAppState, [appName, JSON.stringify(app)]);
  await client.query(sql.updateSessionState, [session.sessionId, JSON.stringify(own)]);
}
