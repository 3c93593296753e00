/**
 * The watch scenario the memory RPC suites share (one server, two replicas on
 * Redis, two on PostgreSQL): `watcher` follows user fay's scope while
 * `writer` writes fay's memory, another user's, an app-wide one, a newer
 * version of fay's (superseding the first) and then forgets two of them.
 */
import type { MemoryClient } from "./clients.js";

/** What fay's watch must see of the scenario, in order: nothing of gus. */
export const FAY_WATCH_FRAMES = [
  "written w-1 fay is calm",
  "written w-shared the office is open",
  "superseded w-1 fay is calm",
  "written w-2 fay is excited",
  "deleted w-1",
];

/** Runs the scenario; resolves with the frames the watch saw (as FAY_WATCH_FRAMES spells them) once it saw as many, or after `withinMs`. */
export async function watchFaysScope(
  watcher: MemoryClient,
  writer: MemoryClient,
  appName: string,
  withinMs = 20_000,
): Promise<string[]> {
  const abort = new AbortController();
  const frames: string[] = [];
  let started!: () => void;
  const ready = new Promise<void>((resolve) => (started = resolve));
  const done = (async () => {
    try {
      for await (const f of watcher.watchMemories(
        { appName, userId: "fay" },
        { signal: AbortSignal.any([abort.signal, AbortSignal.timeout(withinMs)]) },
      )) {
        const frame = f.frame;
        if (frame.case === "started") started();
        else if (frame.case === "written" || frame.case === "superseded")
          frames.push(`${frame.case} ${frame.value.memoryId} ${frame.value.text}`);
        else if (frame.case === "deleted") frames.push(`deleted ${frame.value.memoryIds.join(",")}`);
        if (frames.length === FAY_WATCH_FRAMES.length) abort.abort();
      }
    } catch {
      // Aborted here, or timed out: the frames then say what was missing.
    }
  })();
  // Each change is made once the watch saw the one before: a watcher on another replica reads the
  // changes from the store when told of them, and a memory deleted by then is reported by its
  // deletion alone (docs/memories.md's "as it is by then"), which would drop "superseded w-1" under load.
  const deadline = Date.now() + withinMs;
  const seen = async (count: number) => {
    while (frames.length < count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  };
  await ready;
  await writer.writeMemories({
    memories: [{ memoryId: "w-1", appName, userId: "fay", key: "mood", text: "fay is calm" }],
  });
  await seen(1);
  await writer.writeMemories({ memories: [{ memoryId: "w-other", appName, userId: "gus", text: "gus is busy" }] });
  await writer.writeMemories({ memories: [{ memoryId: "w-shared", appName, text: "the office is open" }] });
  await seen(2);
  await writer.writeMemories({
    memories: [{ memoryId: "w-2", appName, userId: "fay", key: "mood", text: "fay is excited" }],
  });
  await seen(4);
  await writer.deleteMemories({ appName, memoryIds: ["w-1", "w-other"] });
  await done;
  return frames;
}

/** What fay's resumed watch must see: the changes made while it was away (as they are now), then a live one; each once. */
export const FAY_RESUMED_FRAMES = [
  // w-1 was superseded and then forgotten while the watch was away: its deletion stands for both.
  "written w-shared the office is open",
  "written w-2 fay is excited",
  "deleted w-1",
  "written w-3 fay is back",
];

/**
 * The resume scenario: `watcher` follows fay's scope and sees w-1 written,
 * then disconnects; `writer` writes and forgets while it is away (the watch
 * scenario's changes); the watch reconnects with `after` = the cursor of the
 * last frame it saw, and `writer` writes w-3 once it is live again. Resolves
 * with the frames after the reconnect and whether their cursors rose strictly.
 */
export async function resumeFaysWatch(
  watcher: MemoryClient,
  writer: MemoryClient,
  appName: string,
  withinMs = 20_000,
): Promise<{ frames: string[]; cursorsRise: boolean }> {
  let last = 0n;
  {
    const abort = new AbortController();
    const signal = AbortSignal.any([abort.signal, AbortSignal.timeout(withinMs)]);
    try {
      for await (const f of watcher.watchMemories({ appName, userId: "fay" }, { signal })) {
        if (f.frame.case === "started")
          await writer.writeMemories({
            memories: [{ memoryId: "w-1", appName, userId: "fay", key: "mood", text: "fay is calm" }],
          });
        if (f.frame.case === "written") {
          last = f.cursor;
          abort.abort();
        }
      }
    } catch {
      // Aborted: the watcher is away now.
    }
  }
  await writer.writeMemories({ memories: [{ memoryId: "w-other", appName, userId: "gus", text: "gus is busy" }] });
  await writer.writeMemories({ memories: [{ memoryId: "w-shared", appName, text: "the office is open" }] });
  await writer.writeMemories({
    memories: [{ memoryId: "w-2", appName, userId: "fay", key: "mood", text: "fay is excited" }],
  });
  await writer.deleteMemories({ appName, memoryIds: ["w-1", "w-other"] });
  const abort = new AbortController();
  const frames: string[] = [];
  const cursors: bigint[] = [];
  try {
    for await (const f of watcher.watchMemories(
      { appName, userId: "fay", after: last },
      { signal: AbortSignal.any([abort.signal, AbortSignal.timeout(withinMs)]) },
    )) {
      const frame = f.frame;
      if (frame.case === "started" || frame.case === "heartbeat") continue;
      cursors.push(f.cursor);
      if (frame.case === "written" || frame.case === "superseded")
        frames.push(`${frame.case} ${frame.value.memoryId} ${frame.value.text}`);
      else if (frame.case === "deleted") frames.push(`deleted ${frame.value.memoryIds.join(",")}`);
      // Caught up: one live change follows.
      if (frame.case === "deleted")
        await writer.writeMemories({ memories: [{ memoryId: "w-3", appName, userId: "fay", text: "fay is back" }] });
      if (frames.length >= FAY_RESUMED_FRAMES.length) abort.abort();
    }
  } catch {
    // Aborted here, or timed out: the frames then say what was missing.
  }
  return { frames, cursorsRise: cursors.every((c, i) => i === 0 || c > cursors[i - 1]) && (cursors[0] ?? 0n) > last };
}
