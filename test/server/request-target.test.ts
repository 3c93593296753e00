/**
 * Reading a request target's path and query (src/server/request-target.ts)
 * as the WHATWG URL parser does, which the REST, MCP and inspector routes
 * match on, without parsing a URL for the plain targets every request has.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { requestTarget } from "../../src/server/request-target.js";
import { requireUtf8Query } from "../../src/server/utf8.js";

/** What every route matched on before: `new URL(target, "http://localhost")`, or undefined where it throws. */
function byUrl(target: string): { pathname: string; search: string } | undefined {
  try {
    const url = new URL(target, "http://localhost");
    return { pathname: url.pathname, search: url.search };
  } catch {
    return undefined;
  }
}

/** Pieces of a target that URL keeps, rewrites, resolves or refuses, and plain ones. */
const ODD = [..."/?#.%\\:@!$&'()*+,;=~-_[]{}|^`\"<> \t", "%2e", "%2E", "%zz", "%FF", "é", "\u{1F600}", "\u0000"];
const PLAIN = [
  "a",
  "memory",
  "events",
  "mcp",
  "healthz",
  "engram.v1.MemoryService",
  "AddEvent",
  "session_id=s1",
  "limit=20",
  "&",
];
const segmentArb = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.constantFrom(...PLAIN), { minLength: 1, maxLength: 2 }).map((p) => p.join("")) },
  { weight: 2, arbitrary: fc.constantFrom(".", "..", "", "%2e", ".%2E") },
  {
    weight: 2,
    arbitrary: fc.array(fc.constantFrom(...PLAIN, ...ODD), { minLength: 1, maxLength: 3 }).map((p) => p.join("")),
  },
);
/** Mostly absolute paths of such segments with a query of them, sometimes anything at all. */
const targetArb = fc.oneof(
  {
    weight: 5,
    arbitrary: fc
      .tuple(fc.array(segmentArb, { maxLength: 5 }), fc.option(fc.array(segmentArb, { maxLength: 4 })))
      .map(([path, query]) => `/${path.join("/")}${query === null ? "" : `?${query.join("")}`}`),
  },
  { weight: 1, arbitrary: fc.array(fc.constantFrom(...PLAIN, ...ODD), { maxLength: 12 }).map((p) => p.join("")) },
);

describe("requestTarget", () => {
  it.each([
    ["/memory/events?session_id=s1&limit=20", "plain REST read"],
    ["/engram.v1.MemoryService/AddEvent", "a Connect call"],
    ["/memory/events", "no query"],
    ["/memory/events?", "an empty query"],
    ["/memory/../memory/events?limit=1", "a dot segment"],
    ["/memory/./events", "a single-dot segment"],
    ["/memory/%2e%2e/memory/events", "a percent-encoded dot segment"],
    ["/memory\\events", "a backslash"],
    ["//memory/events", "a leading //, a host to URL"],
    ["//[", "an invalid host"],
    ["/memory/events#x?limit=1", "a fragment"],
    ["/memory/events?q=a b\"<>'", "characters the query percent-encodes"],
    ["/memory/events?q=%FF", "a percent-encoded byte that is not UTF-8"],
    ["/m\u00e9mory", "a non-ASCII path"],
    ["*", "an asterisk target"],
    ["http://elsewhere/memory/events?limit=2", "an absolute-form target"],
  ])("reads %s as URL does (%s)", (target) => {
    expect(requestTarget(target)).toEqual(byUrl(target));
  });

  it("reads any target as URL does, and never throws", () => {
    fc.assert(
      fc.property(targetArb, (target) => {
        expect(requestTarget(target)).toEqual(byUrl(target));
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), (target) => {
        expect(requestTarget(target)).toEqual(byUrl(target));
      }),
      { numRuns: 2000 },
    );
  });

  it("takes no URL for a missing target: it is /", () => {
    expect(requestTarget(undefined)).toEqual({ pathname: "/", search: "" });
  });
});

describe("requireUtf8Query", () => {
  it("accepts any query without a percent sign, whatever its characters", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary" }), (text) => {
        fc.pre(!text.includes("%"));
        expect(() => requireUtf8Query(`?${text}`)).not.toThrow();
      }),
    );
  });

  it("refuses a percent-encoded byte that is not UTF-8, naming the parameter", () => {
    expect(() => requireUtf8Query("?session_id=%FF")).toThrow(/query parameter session_id: is not valid UTF-8/);
    expect(() => requireUtf8Query("?a=1&session_id=ok%C3%A9")).not.toThrow();
  });
});
