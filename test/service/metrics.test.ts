/**
 * The per-call metrics keep their own series (prom-client hashes labels on
 * every observation); what /metrics shows must be exactly what prom-client's
 * own Histogram and Counter show for the same observations.
 */
import { readFileSync } from "node:fs";
import { memory } from "../store/memories-conformance.js";
import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { BoundCounter, BoundHistogram, Metrics } from "../../src/service/metrics.js";
import { ConnectingStore } from "../../src/store/connecting.js";
import { LocalStore } from "../../src/store/local.js";

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

describe("BoundHistogram and BoundCounter", () => {
  it("expose the same text as prom-client's Histogram and Counter for the same observations", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const histogram = new BoundHistogram("h_seconds", "help h", ["method", "protocol"], ours);
    const counter = new BoundCounter("c_total", "help c", ["method", "code", "protocol"], ours);
    const refHistogram = new Histogram({
      name: "h_seconds",
      help: "help h",
      labelNames: ["method", "protocol"],
      buckets: BUCKETS,
      registers: [theirs],
    });
    const refCounter = new Counter({
      name: "c_total",
      help: "help c",
      labelNames: ["method", "code", "protocol"],
      registers: [theirs],
    });
    const values = [0, 0.0004, 0.0005, 0.0007, 0.003, 0.02, 0.3, 1, 4.9, 5, 7.5, 120];
    for (const [method, protocol] of [
      ["addEvent", "grpc"],
      ["getSession", "connect"],
      ["addEvent", "rest"],
    ]) {
      const series = histogram.labels({ method, protocol });
      for (const v of values) {
        series.observe(v);
        refHistogram.observe({ method, protocol }, v);
      }
      for (const code of ["OK", "NOT_FOUND", "OK"]) {
        counter.labels({ method, code, protocol }).inc();
        refCounter.inc({ method, code, protocol });
      }
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON());
  });

  it("zeroes its series on the registry's reset, and the series resolved before it keep counting", async () => {
    const registry = new Registry();
    const histogram = new BoundHistogram("h_seconds", "help", ["m"], registry);
    const series = histogram.labels({ m: "a" });
    series.observe(0.002);
    registry.resetMetrics();
    expect(await registry.metrics()).toContain('h_seconds_count{m="a"} 0');
    series.observe(0.003);
    const text = await registry.metrics();
    expect(text).toContain('h_seconds_count{m="a"} 1');
    expect(text).toContain('h_seconds_bucket{le="0.005",m="a"} 1');
    expect(text).toContain('h_seconds_bucket{le="0.001",m="a"} 0');
  });

  it("resolves a label set once: the same series whatever the object's key order", () => {
    const registry = new Registry();
    const counter = new BoundCounter("c_total", "help", ["a", "b"], registry);
    counter.labels({ a: "1", b: "2" }).inc();
    counter.labels({ b: "2", a: "1" }).inc(2);
    return expect(registry.metrics()).resolves.toContain('c_total{a="1",b="2"} 3');
  });
});

describe("Metrics.instrument", () => {
  it("times every store operation and passes everything else through; a client's NOT_FOUND is not a store error", async () => {
    const store = new LocalStore({ maxSessions: 10, maxSessionEvents: 10 } as never);
    const metrics = new Metrics(store);
    const timed = metrics.instrument(store);
    expect(timed.backend).toBe("local");
    await timed.createSession({ sessionId: "s1", appName: "a", userId: "u", metadata: {} } as never);
    await expect(timed.getSession("s1")).resolves.toMatchObject({ sessionId: "s1" });
    await expect(timed.appendEvents("missing", [], undefined)).rejects.toMatchObject({ code: "NOT_FOUND" });
    await expect(
      timed.createSession({ sessionId: "s1", appName: "a", userId: "u", metadata: {} } as never),
    ).rejects.toMatchObject({ code: "ALREADY_EXISTS" });
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/engram_store_operation_duration_seconds_count\{operation="getSession",backend="local"\} 1\n/);
    expect(text).toMatch(
      /engram_store_operation_duration_seconds_count\{operation="appendEvents",backend="local"\} 1\n/,
    );
    expect(text).not.toMatch(/^engram_store_errors_total\{/m);
    await store.close();
  });

  it("times long-term memory operations and session updates like every other store operation", async () => {
    const store = new LocalStore({ maxSessions: 10, maxSessionEvents: 10 } as never);
    const metrics = new Metrics(store);
    const timed = metrics.instrument(store);
    await timed.createSession({ sessionId: "s1", appName: "app", userId: "u", metadata: {} } as never);
    await timed.updateSession("s1", { metadata: { topic: "t" } } as never);
    await timed.memories.writeMemories([memory({ memoryId: "m1", text: "aisle seats on long flights" })]);
    const scope = { appName: "app", match: "visible" as const };
    await expect(timed.memories.searchMemories({ scope, asOf: Date.now() }, "seat", 5)).resolves.toHaveLength(1);
    await expect(timed.memories.deleteMemories("app", ["m1", "absent"])).resolves.toHaveLength(1);
    const text = await metrics.registry.metrics();
    for (const operation of ["updateSession", "writeMemories", "searchMemories", "deleteMemories"])
      expect(text).toMatch(
        new RegExp(`engram_store_operation_duration_seconds_count\\{operation="${operation}",backend="local"\\} 1\n`),
      );
    await store.close();
  });

  it("counts a backend failure (a store that is not connected) by operation and code", async () => {
    // A store whose backend never answers the open: every operation fails UNAVAILABLE.
    const store = new ConnectingStore("redis", () => new Promise<never>(() => {}), {
      failed: () => {},
      opened: () => {},
    });
    const metrics = new Metrics(store);
    const timed = metrics.instrument(store);
    await expect(timed.getSession("s1")).rejects.toMatchObject({ code: "UNAVAILABLE" });
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/engram_store_errors_total\{operation="getSession",backend="redis",code="UNAVAILABLE"\} 1\n/);
    await store.close();
  });

  it("reports the running version and Node.js in engram_build_info", async () => {
    const { version } = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    const text = await new Metrics(
      new LocalStore({ maxSessions: 10, maxSessionEvents: 10 } as never),
    ).registry.metrics();
    expect(text).toContain(`engram_build_info{version="${version}",node="${process.version}"} 1\n`);
  });
});
