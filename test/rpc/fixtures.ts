/**
 * What the RPC suites share besides the suites themselves: unique session
 * ids and bounded stream reads. Kept apart so that the suites can import them
 * without importing each other.
 */
import type { StreamSessionEventsResponse } from "@engram-memory/client/gen/engram/v1/memory_pb.js";

let unique = 0;
/** A session id no other test uses. */
export const sid = (label = "s") => `${label}-${process.pid}-${++unique}-${Date.now().toString(36)}`;

/** Reads frames until `until` says stop (or the stream ends); bounded by a timeout. */
export async function collect(
  stream: AsyncIterable<StreamSessionEventsResponse>,
  until: (frames: StreamSessionEventsResponse[]) => boolean,
  controller: AbortController,
  timeoutMs = 10_000,
): Promise<StreamSessionEventsResponse[]> {
  const frames: StreamSessionEventsResponse[] = [];
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    for await (const frame of stream) {
      frames.push(frame);
      if (until(frames)) break;
    }
  } finally {
    clearTimeout(timer);
  }
  return frames;
}

/** Seqs of the event frames. */
export const seqsOf = (frames: StreamSessionEventsResponse[]) =>
  frames.flatMap((f) => (f.frame.case === "event" ? [Number(f.frame.value.seq)] : []));

/**
 * collect(), plus `caughtUp`: resolves once the stream has sent its caught-up
 * frame (or ended), so that a test appends live events only after the server
 * has subscribed the stream and replayed the log.
 */
export function collectLive(
  stream: AsyncIterable<StreamSessionEventsResponse>,
  until: (frames: StreamSessionEventsResponse[]) => boolean,
  controller: AbortController,
): { frames: Promise<StreamSessionEventsResponse[]>; caughtUp: Promise<void> } {
  let reached!: () => void;
  const caughtUp = new Promise<void>((resolve) => (reached = resolve));
  const frames = collect(
    stream,
    (f) => {
      if (f.at(-1)?.frame.case === "caughtUp") reached();
      return until(f);
    },
    controller,
  );
  frames.then(reached, reached);
  return { frames, caughtUp };
}
