/**
 * Output of the CLI: human tables on stdout by default, JSON with --json,
 * progress and diagnostics on stderr (so stdout stays clean for pipes).
 */
import Table from "cli-table3";
import { InvalidArgumentError } from "commander";
import type { JsonValue, Memory, MemoryEvent, Session } from "@engram-memory/client";

/** A borderless, left-aligned table (the kubectl look), without colour codes. */
export function table(head: string[], rows: Array<Array<string | number>>): string {
  const t = new Table({
    head,
    chars: {
      top: "",
      "top-mid": "",
      "top-left": "",
      "top-right": "",
      bottom: "",
      "bottom-mid": "",
      "bottom-left": "",
      "bottom-right": "",
      left: "",
      "left-mid": "",
      mid: "",
      "mid-mid": "",
      right: "",
      "right-mid": "",
      middle: "  ",
    },
    style: { head: [], border: [], "padding-left": 0, "padding-right": 0 },
  });
  t.push(...rows.map((r) => r.map(String)));
  return t
    .toString()
    .split("\n")
    .map((line) => line.trimEnd())
    .join("\n");
}

/** Writes a JSON document (pretty) or a JSON line to stdout. */
export function printJson(value: unknown, line = false): void {
  process.stdout.write(`${line ? JSON.stringify(value) : JSON.stringify(value, null, 2)}\n`);
}

/** A commander parser for whole numbers ≥ 0 (≥ 1 with min 1), naming the option in its message. */
export function positiveInt(name: string, min = 0): (value: string) => number {
  return (value) => {
    if (!/^\d+$/.test(value) || Number(value) < min || !Number.isSafeInteger(Number(value))) {
      throw new InvalidArgumentError(
        `${name}: expected a whole number${min > 0 ? ` ≥ ${min}` : ""}, got ${JSON.stringify(value)}`,
      );
    }
    return Number(value);
  };
}

/** A one-line rendering of any JSON value, cut to `max` characters. */
export function oneLine(value: JsonValue, max = 80): string {
  const text = (typeof value === "string" ? value : JSON.stringify(value)).replace(/\s+/g, " ");
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** ISO time or "". */
export function iso(date: Date | undefined): string {
  return date ? date.toISOString() : "";
}

/** A session in the wire's snake_case JSON shape. */
export function sessionJson(s: Session) {
  return {
    session_id: s.sessionId,
    app_name: s.appName,
    user_id: s.userId,
    metadata: s.metadata,
    created_at: iso(s.createdAt),
    updated_at: iso(s.updatedAt),
    head_seq: s.headSeq,
    first_seq: s.firstSeq,
    event_count: s.eventCount,
  };
}

/** An event in the KAOS MemoryEvent.to_dict() shape, plus its seq and session. */
export function eventJson(e: MemoryEvent) {
  return {
    event_id: e.eventId,
    timestamp: iso(e.timestamp),
    event_type: e.eventType,
    content: e.content,
    metadata: e.metadata,
    seq: e.seq,
    session_id: e.sessionId,
  };
}

/** A memory in the wire's snake_case JSON shape (unset scope fields left out). */
export function memoryJson(m: Memory) {
  return {
    memory_id: m.memoryId,
    app_name: m.appName,
    ...(m.userId === undefined ? {} : { user_id: m.userId }),
    ...(m.agentId === undefined ? {} : { agent_id: m.agentId }),
    ...(m.sessionId === undefined ? {} : { session_id: m.sessionId }),
    text: m.text,
    ...(m.fact ? { fact: m.fact } : {}),
    key: m.key,
    topics: m.topics,
    importance: m.importance,
    pinned: m.pinned,
    metadata: m.metadata,
    ...(m.source
      ? { source: { session_id: m.source.sessionId, from_seq: m.source.fromSeq, to_seq: m.source.toSeq } }
      : {}),
    created_at: iso(m.createdAt),
    valid_from: iso(m.validFrom),
    invalid_at: iso(m.invalidAt),
    superseded_by: m.supersededBy,
  };
}

/**
 * Progress of a long operation on stderr: one rewritten line on a terminal,
 * a line every few seconds otherwise (logs), and always a final line.
 */
export class Progress {
  private lastWrite = 0;
  private readonly tty = Boolean(process.stderr.isTTY);

  constructor(private readonly enabled: boolean) {}

  /** Reports the current state; throttled. */
  update(text: string): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.lastWrite < (this.tty ? 100 : 2000)) return;
    this.lastWrite = now;
    process.stderr.write(this.tty ? `\r\x1b[2K${text}` : `${text}\n`);
  }

  /** The final state, always written. */
  done(text: string): void {
    if (!this.enabled) return;
    process.stderr.write(this.tty ? `\r\x1b[2K${text}\n` : `${text}\n`);
  }
}
