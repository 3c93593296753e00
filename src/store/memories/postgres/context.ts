/** What the parts of the PostgreSQL memory store share. */
import type { PostgresDatabase } from "../../postgres/database.js";
import type { SearchColumns } from "./search-columns.js";

/** The database, schema, channel and search columns of one store's memories. */
export interface MemoriesContext {
  db: PostgresDatabase;
  /** The quoted schema, prefixed to every table name. */
  s: string;
  /** The unquoted schema, naming the store's advisory locks. */
  schemaName: string;
  /** The store's LISTEN/NOTIFY channel. */
  channel: string;
  /** Tells this replica's notices apart from other replicas'. */
  origin: string;
  search: SearchColumns;
}
