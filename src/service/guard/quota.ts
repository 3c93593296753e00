/**
 * Quotas (src/service/quotas.ts): every keyed call spends one of its key's
 * calls per second; a stream holds a slot of the replica's (and its key's)
 * live streams for as long as it lives. Every refusal is counted in
 * engram_rate_limited_total.
 */
import type { StepFactory } from "./step.js";

/** RESOURCE_EXHAUSTED past the key's calls per second; absent while auth is off (no key to count). */
export const rateLimit: StepFactory = (_plan, { authenticator, quotas, metrics }) => {
  if (!authenticator) return undefined;
  return (next) => async (call) => {
    const { keyId, rateLimit: keyRateLimit } = call.principal!;
    try {
      await quotas.consume(keyId, keyRateLimit);
    } catch (err) {
      metrics.rateLimited.inc();
      throw err;
    }
    return next(call);
  };
};

/** A stream takes a live-stream slot (engram_streams_active) and gives it back when it ends; RESOURCE_EXHAUSTED when none is free. */
export const holdStreamSlot: StepFactory = ({ streaming }, { quotas, metrics }) => {
  if (!streaming) return undefined;
  return (next) => (call) => {
    let release: () => void;
    try {
      release = quotas.openStream(call.principal?.keyId);
    } catch (err) {
      metrics.rateLimited.inc();
      throw err;
    }
    metrics.streams.inc();
    call.whenEnded.push(() => {
      release();
      metrics.streams.dec();
    });
    return next(call);
  };
};
