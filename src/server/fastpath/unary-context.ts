/**
 * The HandlerContext the Connect unary fast path (connect-unary.ts) gives an
 * implementation, and how an adapter reads a request header from any
 * context without making connect's Headers objects on the fast path. Kept
 * apart from the transport so the adapter depends on the context only.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type ContextValues, type HandlerContext } from "@connectrpc/connect";
/**
 * A HandlerContext whose costly parts (the signal and its deadline timer,
 * the Headers objects, the URL, the context values) are made only when an
 * implementation reads them; MemoryService reads only plain header values
 * (requestHeaderValue).
 */
export class UnaryContext implements HandlerContext {
  readonly requestMethod = "POST";
  readonly protocolName = "connect";
  readonly service: DescService;
  private readonly deadline: number | undefined;
  private controller?: AbortController;
  private timer?: NodeJS.Timeout;
  private onClose?: () => void;
  private requestHeaders?: Headers;
  private responseHeaders?: Headers;
  private responseTrailers?: Headers;
  private contextValues?: ContextValues;
  private done = false;

  constructor(
    readonly method: DescMethod,
    readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    timeoutMs: number | undefined,
    private readonly contentType: string,
  ) {
    this.service = method.parent;
    this.deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  }

  /** Aborted when the deadline passes, the client goes away, or the call is over (as connect-es does). */
  get signal(): AbortSignal {
    if (!this.controller) {
      const controller = (this.controller = new AbortController());
      if (this.done) controller.abort();
      else {
        if (this.deadline !== undefined) {
          this.timer = setTimeout(
            () => controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded)),
            Math.max(0, this.deadline - Date.now()),
          );
        }
        this.onClose = () => controller.abort();
        this.res.once("close", this.onClose);
      }
    }
    return this.controller.signal;
  }

  timeoutMs = (): number | undefined => (this.deadline === undefined ? undefined : this.deadline - Date.now());

  get requestHeader(): Headers {
    if (!this.requestHeaders) {
      const header = new Headers();
      const raw = this.req.rawHeaders;
      for (let i = 0; i + 1 < raw.length; i += 2) header.append(raw[i], raw[i + 1]);
      this.requestHeaders = header;
    }
    return this.requestHeaders;
  }

  get responseHeader(): Headers {
    return (this.responseHeaders ??= new Headers({ "content-type": this.contentType }));
  }

  get responseTrailer(): Headers {
    return (this.responseTrailers ??= new Headers());
  }

  get values(): ContextValues {
    return (this.contextValues ??= createContextValues());
  }

  get url(): string {
    const scheme = "encrypted" in this.req.socket && this.req.socket.encrypted ? "https" : "http";
    return new URL(this.req.url ?? "", `${scheme}://${this.req.headers.host ?? "localhost"}`).toString();
  }

  /** Ends the call: the signal (if one was made) is aborted, as connect-es aborts it after every call. */
  finish(reason?: unknown): void {
    this.done = true;
    if (!this.controller) return;
    clearTimeout(this.timer);
    if (this.onClose) this.res.off("close", this.onClose);
    this.controller.abort(reason);
  }

  /** The response's node headers: content type and length, what the implementation set, its trailers as `trailer-` headers. */
  nodeHeaders(contentType: string, extra: Record<string, string>): Record<string, string> {
    const out: Record<string, string> = {};
    if (this.responseHeaders) {
      this.responseHeaders.set("content-type", contentType);
      for (const [key, value] of this.responseHeaders) out[key] = value;
    } else out["content-type"] = contentType;
    if (this.responseTrailers) for (const [key, value] of this.responseTrailers) out[`trailer-${key}`] = value;
    return Object.assign(out, extra);
  }
}

/** A header's value as connect's Headers would give it (repeated values joined by ", "). */
export function headerValue(req: IncomingMessage, name: string): string | null {
  const value = req.headers[name];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(", ") : value;
}

/**
 * A request header's value from a handler context: read straight from node's
 * headers on the fast path (no Headers object made), else from connect's.
 */
export function requestHeaderValue(ctx: HandlerContext, name: string): string | undefined {
  if (ctx instanceof UnaryContext) return headerValue(ctx.req, name) ?? undefined;
  return ctx.requestHeader.get(name) ?? undefined;
}

/** Whether the fast path gave this context (whose unary handlers need no signal, see CallContext.signal). */
export function isFastUnaryContext(ctx: HandlerContext): boolean {
  return ctx instanceof UnaryContext;
}
