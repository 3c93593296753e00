/** Documented input limits; violations answer INVALID_ARGUMENT naming the field. */
export interface ServiceLimits {
  /** Bytes of JSON for one event's content + metadata (default 256 KiB). */
  maxEventBytes: number;
  /** Events in one AddEvents batch (default 500). */
  maxBatchEvents: number;
  /** Nesting depth of content and metadata JSON (64). */
  maxJsonDepth: number;
  /** Default and maximum of page_size / limit. */
  defaultPageSize: number;
  maxPageSize: number;
}

/** The defaults, as documented in docs/configuration.md. */
export const DEFAULT_SERVICE_LIMITS: ServiceLimits = {
  maxEventBytes: 256 * 1024,
  maxBatchEvents: 500,
  maxJsonDepth: 64,
  defaultPageSize: 100,
  maxPageSize: 1000,
};

/** Pattern of session_id and event_id: printable ASCII without spaces. */
export const ID_PATTERN = /^[!-~]{1,128}$/;
/** Pattern of event_type: an open string of a documented shape. */
export const EVENT_TYPE_PATTERN = /^[A-Za-z][A-Za-z0-9_.:/-]{0,63}$/;
/** Maximum UTF-8 bytes of app_name and user_id. */
export const MAX_NAME_BYTES = 256;
