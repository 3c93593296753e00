/**
 * The small REST surface over HTTP/1.1: KAOS-compatible memory endpoints and
 * liveness/readiness probes. It calls the same MemoryService as the RPC paths.
 *
 * Every HTTP/1.1 request is offered here first, so a request that is not
 * REST's is declined synchronously, its target read without a URL
 * (request-target.ts). A REST call pays only for what it uses: its call has
 * no AbortSignal (it runs unary methods, which never read one, as on the
 * gRPC edge), and each event's KAOS JSON is written once per shared wire
 * Event. Profiled (bench/README.md, issue 23), the AbortController aborted
 * at every response's close (a DOMException each), the per-call
 * kaosEvent + JSON.stringify and the query's UTF-8 check were what a REST
 * read cost beyond a gRPC one.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import {
  ListEventsRequestSchema,
  ListSessionsRequestSchema,
  type Event,
  type ListEventsResponse,
  type ListSessionsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument, MemoryError } from "../errors.js";
import type { CallGuard } from "../service/guard/index.js";
import type { Metrics } from "../service/metrics.js";
import type { HealthMonitor } from "./health.js";
import { refusedUnlessRead, sendJsonError, type InternalErrorReporter } from "./status.js";
import { requireUtf8Query } from "./utf8.js";
import { valueToJson } from "../service/convert.js";
import { httpCallHeaders } from "./http-call-context.js";
import { requestTarget } from "./request-target.js";
import { joinUtf8, type Utf8Piece } from "./fastpath/body-buffer.js";

/** KAOS caps listing limits at 1000 rather than refusing them. */
const MAX_LIMIT = 1000;

/**
 * GET /memory/sessions without `limit` or `page_token` lists every session, as
 * KAOS does, in pages of MAX_LIMIT; past this many ids the answer stops and
 * carries a `next_page_token`, so one request stays bounded in memory and time.
 */
export const MAX_UNPAGED_SESSIONS = 10_000;

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  sendJsonBytes(res, status, Buffer.from(JSON.stringify(body)));
}

function sendJsonBytes(res: ServerResponse, status: number, bytes: Uint8Array): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": bytes.byteLength });
  res.end(bytes);
}

function limitParam(params: URLSearchParams, fallback = 100): number {
  const raw = params.get("limit");
  if (raw === null || raw === "") return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) throw invalidArgument("limit", "must be a positive whole number");
  return Math.min(Number(raw), MAX_LIMIT);
}

function optionalParam(params: URLSearchParams, name: string): string | undefined {
  const v = params.get(name);
  return v === null || v === "" ? undefined : v;
}

/** The KAOS MemoryEvent.to_dict() shape (what an answer's event text is the JSON.stringify of). */
export function kaosEvent(e: Event) {
  return {
    event_id: e.eventId,
    timestamp: new Date(timestampMs(e.timestamp!)).toISOString(),
    event_type: e.eventType,
    content: valueToJson("content", e.content, Number.MAX_SAFE_INTEGER),
    metadata: e.metadata ?? {},
    seq: Number(e.seq),
    session_id: e.sessionId,
  };
}

/**
 * UTF-8 of recent events' KAOS JSON: the service hands every reader the same
 * wire Event for a recent event (as event-json.ts relies on), so each is
 * written and encoded once. An event kaosEvent refuses is not kept: it
 * throws again on the next read.
 */
const kaosEventBytes = new WeakMap<Event, Uint8Array>();

/** JSON.stringify(kaosEvent(e)) as UTF-8, made once per wire Event. */
function kaosEventJson(e: Event): Uint8Array {
  let bytes = kaosEventBytes.get(e);
  if (bytes === undefined) kaosEventBytes.set(e, (bytes = Buffer.from(JSON.stringify(kaosEvent(e)))));
  return bytes;
}

/** Handles REST requests; returns false, synchronously, when the path is not a REST one. */
export function createRestHandler(opts: {
  guard: CallGuard;
  health: HealthMonitor;
  agentName: string;
  report: InternalErrorReporter;
  /** Serves GET /metrics when given. */
  metrics?: Metrics;
}) {
  const { guard, health, agentName, report, metrics } = opts;
  const service = guard.service;
  const listEvents = guard.handler("listEvents");
  const listSessions = guard.handler("listSessions");
  const routes = new Set([
    "/healthz",
    "/readyz",
    "/memory/events",
    "/memory/sessions",
    ...(metrics ? ["/metrics"] : []),
  ]);
  // JSON.stringify({ agent, events, total }), with each event's text made once (kaosEventJson).
  const eventsPrefix = `{"agent":${JSON.stringify(agentName)},"events":[`;
  /** Answers a REST route; what it throws past its own error answers is the handler's to report. */
  async function serve(route: string, search: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Unary methods only, which never read a signal (CallContext.signal).
    const call = httpCallHeaders(req, "rest");
    try {
      // URLSearchParams reads a bad percent-encoded byte as U+FFFD: refuse it rather than look it up or store it.
      requireUtf8Query(search);
      const params = new URLSearchParams(search);
      switch (route) {
        case "/metrics": {
          const body = await metrics!.registry.metrics();
          res.writeHead(200, { "content-type": metrics!.registry.contentType });
          res.end(body);
          break;
        }
        case "/healthz":
          sendJson(res, 200, { status: "ok" });
          break;
        case "/readyz": {
          const { status, reason } = health;
          sendJson(res, status === "SERVING" ? 200 : 503, {
            status,
            backend: service.store.backend,
            ...(reason === undefined ? {} : { reason }),
          });
          break;
        }
        case "/memory/events": {
          const sessionId = optionalParam(params, "session_id");
          const limit = limitParam(params);
          let found: Event[];
          try {
            found = (
              (await listEvents(create(ListEventsRequestSchema, { sessionId, limit }), call)) as ListEventsResponse
            ).events;
          } catch (err) {
            // KAOS answers an unknown session with no events (its get_session_events returns []), not 404.
            if (!(sessionId !== undefined && err instanceof MemoryError && err.reason === "SESSION_NOT_FOUND"))
              throw err;
            found = [];
          }
          const body: Utf8Piece[] = [eventsPrefix];
          for (let i = 0; i < found.length; i++) {
            if (i > 0) body.push(",");
            body.push(kaosEventJson(found[i]));
          }
          body.push(`],"total":${found.length}}`);
          sendJsonBytes(res, 200, joinUtf8(body));
          break;
        }
        case "/memory/sessions": {
          // KAOS lists every session; a page only when the caller asks for one (limit or page_token).
          const paged = params.has("limit") || params.has("page_token");
          const pageSize = limitParam(params, MAX_LIMIT);
          const appName = optionalParam(params, "app_name");
          const userId = optionalParam(params, "user_id");
          let pageToken = params.get("page_token") ?? "";
          const sessions: string[] = [];
          do {
            const out = (await listSessions(
              create(ListSessionsRequestSchema, { appName, userId, pageSize, pageToken }),
              call,
            )) as ListSessionsResponse;
            for (const s of out.sessions) sessions.push(s.sessionId);
            pageToken = out.nextPageToken;
          } while (!paged && pageToken !== "" && sessions.length < MAX_UNPAGED_SESSIONS);
          sendJson(res, 200, { agent: agentName, sessions, total: sessions.length, next_page_token: pageToken });
          break;
        }
      }
    } catch (err) {
      sendRestError(res, err, report);
    }
  }
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    const target = requestTarget(req.url);
    if (target === undefined || !routes.has(target.pathname)) return false;
    const route = target.pathname;
    if (refusedUnlessRead(req, res, route)) return true;
    serve(route, target.search, req, res).catch((err: unknown) => {
      report(err);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
    return true;
  };
}

/** Answers a REST request with the error's HTTP status and the shared JSON error (src/server/status.ts), `error` included for KAOS clients. */
export function sendRestError(res: ServerResponse, err: unknown, report?: InternalErrorReporter): void {
  sendJsonError(res, err, { kaos: true, report });
}
