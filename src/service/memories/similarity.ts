/**
 * Vectors and how alike they are: the checks every embedding passes (from a
 * client's write or from the endpoint) and cosine similarity for ranking.
 * Kept apart from the endpoint's client so that configuration and validation
 * can use them without loading an HTTP client.
 */
import { MemoryError } from "../../errors.js";

/** The longest vector accepted, from a client or the endpoint (the largest common embedding models make 4096). */
export const MAX_EMBEDDING_DIMENSION = 4096;

/** Reason (ErrorInfo) of a vector whose length is not the one expected. */
export const EMBEDDING_DIMENSION_MISMATCH = "EMBEDDING_DIMENSION_MISMATCH";

/**
 * Checks a vector a client sent (`field` names it, e.g.
 * "memories[2].embedding"): 1 to MAX_EMBEDDING_DIMENSION finite numbers and,
 * when the app already has a dimension, exactly that many. INVALID_ARGUMENT
 * naming the field otherwise.
 */
export function validateEmbedding(values: ArrayLike<number>, field: string, expectedDimension?: number): void {
  if (values.length === 0 || values.length > MAX_EMBEDDING_DIMENSION) {
    throw fieldError(field, `an embedding has 1-${MAX_EMBEDDING_DIMENSION} dimensions, got ${values.length}`);
  }
  for (let i = 0; i < values.length; i++) {
    if (!Number.isFinite(values[i]))
      throw fieldError(field, `value ${i} is ${values[i]}; every value must be a finite number`);
  }
  if (expectedDimension !== undefined && values.length !== expectedDimension) {
    throw new MemoryError(
      "INVALID_ARGUMENT",
      `${field}: has ${values.length} dimensions but this app's embeddings have ${expectedDimension}`,
      {},
      {
        field,
        fieldProblem: `has ${values.length} dimensions but this app's embeddings have ${expectedDimension}`,
        reason: EMBEDDING_DIMENSION_MISMATCH,
        info: { expected_dimension: String(expectedDimension), actual_dimension: String(values.length) },
      },
    );
  }
}

/**
 * The cosine of the angle between two vectors of one length, in [-1, 1];
 * 0 when either is all zeros (no direction, so no similarity).
 */
export function cosineSimilarity(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length)
    throw new RangeError(`cosineSimilarity: vectors of ${a.length} and ${b.length} dimensions`);
  let dot = 0;
  let normA = 0;
  let normB = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    normA += a[i]! * a[i]!;
    normB += b[i]! * b[i]!;
  }
  if (normA === 0 || normB === 0) return 0;
  // Rounding can carry |cos| a hair past 1 for (anti)parallel vectors.
  return Math.max(-1, Math.min(1, dot / Math.sqrt(normA * normB)));
}

function fieldError(field: string, problem: string): MemoryError {
  return new MemoryError("INVALID_ARGUMENT", `${field}: ${problem}`, {}, { field, fieldProblem: problem });
}
