/**
 * The path and query of an HTTP/1.1 request target as the WHATWG URL parser
 * reads them (`new URL(target, "http://localhost")`: dot segments resolved,
 * backslashes as slashes, unusual characters percent-encoded), which is how
 * the REST, MCP and inspector routes have always matched a request.
 *
 * Every HTTP/1.1 request asks whether it is one of theirs, Connect calls
 * included, so the ordinary target (a plain absolute path, a plain query)
 * is read without a URL: for those the parser would hand back the target's
 * own text. Anything else still goes through `URL`, and a target it cannot
 * parse (such as `//[`, which it reads as an invalid host) is nobody's
 * route: URL throws on it, and a throw out of the request handler would
 * stop the server.
 */

/**
 * A path whose pathname is itself: absolute, not `//` (a host to URL),
 * only characters the parser keeps as they are, no `%` (`%2e` is a dot
 * segment) and no backslash.
 */
const PLAIN_PATH = /^\/(?!\/)[\w\-.~!$&()*+,;=:@/]*$/;

/** A `.` or `..` segment, which the parser resolves. */
const DOT_SEGMENT = /(?:^|\/)\.\.?(?:\/|$)/;

/** A query the parser keeps as it is (no `#`, no quote, nothing it percent-encodes). */
const PLAIN_QUERY = /^[\w\-.~!$&()*+,;=:@/?%]*$/;

/** A request target's pathname and search (`?…`, or "" without a query). */
export interface RequestTarget {
  pathname: string;
  search: string;
}

/** The target's pathname and search as `new URL(url, "http://localhost")` gives them; undefined when URL cannot parse it. */
export function requestTarget(url: string | undefined): RequestTarget | undefined {
  const target = url ?? "/";
  const mark = target.indexOf("?");
  const path = mark < 0 ? target : target.slice(0, mark);
  const query = mark < 0 ? "" : target.slice(mark + 1);
  if (PLAIN_PATH.test(path) && !DOT_SEGMENT.test(path) && PLAIN_QUERY.test(query)) {
    // URL drops an empty query's "?".
    return { pathname: path, search: query === "" ? "" : `?${query}` };
  }
  try {
    const parsed = new URL(target, "http://localhost");
    return { pathname: parsed.pathname, search: parsed.search };
  } catch {
    return undefined;
  }
}
