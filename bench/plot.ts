/**
 * throughput.png: calls per second against concurrency, one panel per
 * workload, one line per backend (the echo ceiling and the store drivers
 * included). Vega-Lite renders SVG offline (no browser, no canvas) and
 * resvg turns it into a PNG.
 */
import { writeFileSync } from "node:fs";
import { Resvg } from "@resvg/resvg-js";
import * as vega from "vega";
import * as vegaLite from "vega-lite";
import type { BenchResults } from "./types.js";

/** Which panel a point belongs to: workloads measured on several backends, baselines beside their server workload. */
function panelOf(workload: string): string {
  if (workload.startsWith("echo") || workload.startsWith("AddEvent")) return "AddEvent (and its ceilings)";
  if (workload.startsWith("last 20 of 1k")) return "GetSessionEvents last 20 of 1k";
  return workload;
}

/** The echo's line: which backend it was measured before, or the calibration (the echo spinning per call). */
function echoSeries(workload: string): string {
  if (workload.includes("spinning")) return "echo spinning 50 µs per call (calibration)";
  return `echo (before ${/before (\w+)/.exec(workload)?.[1] ?? "?"})`;
}

/** Writes the plot of `results` to `file`. */
export async function plotThroughput(results: BenchResults, file: string): Promise<void> {
  const rows = results.points
    .filter((p) => p.throughput > 0)
    .map((p) => ({
      panel: panelOf(p.workload),
      series:
        p.kind === "server" ? `engram ${p.backend}` : p.backend === "grpc-js echo" ? echoSeries(p.workload) : p.backend,
      concurrency: p.concurrency,
      throughput: p.throughput,
    }));
  for (const peer of results.peers) {
    if (peer.throughput <= 0) continue;
    rows.push({
      panel: peer.workload === "append" ? "AddEvent (and its ceilings)" : "GetSessionEvents last 20 of 1k",
      series: `${peer.peer} (${peer.backend})`,
      concurrency: peer.concurrency,
      throughput: peer.throughput,
    });
  }
  const spec: vegaLite.TopLevelSpec = {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: {
      text: `Engram throughput vs concurrency (${String(results.meta.profile)} run, ${String(results.meta.startedAt).slice(0, 16)}Z)`,
      fontSize: 16,
    },
    data: { values: rows },
    facet: { field: "panel", type: "nominal", title: null, header: { labelFontSize: 12, labelLimit: 0 } },
    columns: 3,
    spec: {
      width: 300,
      height: 200,
      mark: { type: "line", point: true },
      encoding: {
        x: {
          field: "concurrency",
          type: "quantitative",
          scale: { type: "log", base: 2 },
          axis: { values: [1, 2, 4, 8, 16, 32, 64] },
          title: "concurrency",
        },
        y: { field: "throughput", type: "quantitative", title: "calls/s (log)", scale: { type: "log" } },
        // category20: the plot has a dozen series, and category10 gave two of them the same colour.
        color: {
          field: "series",
          type: "nominal",
          title: "backend",
          legend: { labelLimit: 0 },
          scale: { scheme: "category20" },
        },
      },
    },
    resolve: { scale: { y: "independent" } },
    config: { background: "white", font: "DejaVu Sans" },
  };
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: "none" });
  const svg = await view.toSVG(2);
  view.finalize();
  const png = new Resvg(svg, { font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" }, background: "white" })
    .render()
    .asPng();
  writeFileSync(file, png);
}
