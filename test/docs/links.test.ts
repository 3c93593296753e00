/**
 * Every relative link of the repository's documentation resolves: the file it
 * names exists, and a `#fragment` into a Markdown file names one of its
 * headings (or an explicit `<a id>`). Pages move between README.md and docs/,
 * and a link left pointing at the old place fails here instead of in a reader's
 * browser.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The documentation whose links are checked, relative to the repository root. */
const PAGES = [
  "README.md",
  ...readdirSync(path.join(REPO_ROOT, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
  ...readdirSync(path.join(REPO_ROOT, "bench"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `bench/${name}`),
  "bench/results/results.md",
  "clients/typescript/README.md",
  "clients/python/README.md",
  "clients/go/README.md",
];

/** The page's lines outside fenced code blocks, where a link is text rather than code. */
function proseLines(markdown: string): string[] {
  let fenced = false;
  return markdown.split("\n").filter((line) => {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens. */
function headingSlug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a Markdown file offers: its headings' slugs (repeats numbered as GitHub does) and `<a id|name>`. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(markdown)) {
    const heading = /^#{1,6} (.+)$/.exec(line);
    if (heading) {
      const slug = headingSlug(heading[1]);
      const count = seen.get(slug) ?? 0;
      anchors.add(count === 0 ? slug : `${slug}-${count}`);
      seen.set(slug, count + 1);
    }
    for (const explicit of line.matchAll(/<a (?:id|name)="([^"]+)"/g)) anchors.add(explicit[1]);
  }
  return anchors;
}

/** The relative link targets of a page's prose (inline code spans left out). */
function relativeLinks(markdown: string): string[] {
  const targets: string[] = [];
  for (const line of proseLines(markdown)) {
    const prose = line.replace(/`[^`]*`/g, "``");
    for (const link of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = link[1];
      if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) targets.push(target);
    }
  }
  return targets;
}

/** Why a link from `page` to `target` does not resolve, or undefined when it does. */
function brokenLink(page: string, target: string): string | undefined {
  const [file, fragment] = target.split("#", 2) as [string, string | undefined];
  const resolved =
    file === "" ? path.join(REPO_ROOT, page) : path.resolve(path.dirname(path.join(REPO_ROOT, page)), file);
  if (!existsSync(resolved)) return `${target}: no file ${path.relative(REPO_ROOT, resolved)}`;
  if (fragment === undefined || fragment === "" || !resolved.endsWith(".md")) return undefined;
  const anchors = anchorsOf(readFileSync(resolved, "utf8"));
  return anchors.has(decodeURIComponent(fragment))
    ? undefined
    : `${target}: no heading #${fragment} in ${path.relative(REPO_ROOT, resolved)}`;
}

describe("documentation links", () => {
  it("finds the pages and their links", () => {
    expect(PAGES).toContain("docs/README.md");
    expect(PAGES).toContain("docs/architecture.md");
    expect(relativeLinks(readFileSync(path.join(REPO_ROOT, "docs/README.md"), "utf8")).length).toBeGreaterThan(10);
  });

  it.each(PAGES)("every relative link of %s resolves to a file and a heading", (page) => {
    const broken = relativeLinks(readFileSync(path.join(REPO_ROOT, page), "utf8"))
      .map((target) => brokenLink(page, target))
      .filter((problem) => problem !== undefined);
    expect(broken).toEqual([]);
  });

  it("makes GitHub's anchors for headings with code, punctuation and repeats", () => {
    expect([...anchorsOf("# MCP (Model Context Protocol)\n## `Recall`: one call\n## Limits\n### Limits\n")]).toEqual([
      "mcp-model-context-protocol",
      "recall-one-call",
      "limits",
      "limits-1",
    ]);
  });
});
