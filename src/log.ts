/** Structured JSON logs on stdout (one object a line), via pino. */
import { pino } from "pino";

/** The process logger. `level` is a label ("info"), `msg` the message. */
export const log = pino({
  // LOG_LEVEL=debug logs every call (method, code, duration, request id).
  level: process.env.LOG_LEVEL || "info",
  base: { service: "engram" },
  formatters: { level: (label) => ({ level: label }) },
  timestamp: pino.stdTimeFunctions.isoTime,
});

/** A logger's shape, for code that takes one. */
export type Logger = typeof log;
