/**
 * Response bodies: buffers for them cut from a shared slab, and a body made
 * of text and of pieces already in UTF-8 (the cached bytes of events) in one
 * buffer of the exact size. Concatenating the texts and encoding the whole
 * with Buffer.from cost 8-10 µs for the JSON of 20 events (flattening the
 * string, allocating ~5 kB, encoding it) on every read: ~7% of a Connect
 * JSON read's server CPU under load (bench/README.md).
 */

/** Text (encoded here) or bytes already encoded. */
export type Utf8Piece = string | Uint8Array;

/**
 * Bodies up to this size are cut from a shared slab, as Buffer.allocUnsafe
 * cuts its small buffers from its pool: an ArrayBuffer of its own cost
 * ~2.5 µs for a 5 kB body here, above Buffer's pool limit of 4 kB. A body
 * keeps its slab alive while it is referenced, as pooled buffers do.
 */
const SLAB_BODY_MAX = 16 * 1024;
const SLAB_SIZE = 128 * 1024;
let slab = Buffer.allocUnsafeSlow(SLAB_SIZE);
let slabUsed = 0;

/** A buffer of `size` bytes, uninitialized, for a response body (while referenced, it keeps its slab alive). */
export function bodyBuffer(size: number): Buffer {
  if (size > SLAB_BODY_MAX) return Buffer.allocUnsafe(size);
  if (slabUsed + size > SLAB_SIZE) {
    slab = Buffer.allocUnsafeSlow(SLAB_SIZE);
    slabUsed = 0;
  }
  const out = slab.subarray(slabUsed, slabUsed + size);
  // Keep the next body 8-byte aligned, as Buffer's pool does.
  slabUsed = (slabUsed + size + 7) & ~7;
  return out;
}

/** Texts this short that are ASCII are copied a char at a time: cheaper than a call into Buffer.write. */
const SHORT_TEXT = 48;

/** The pieces, in order, as UTF-8 bytes. */
export function joinUtf8(pieces: readonly Utf8Piece[]): Buffer {
  let size = 0;
  for (let i = 0; i < pieces.length; i++) {
    const piece = pieces[i];
    size += typeof piece === "string" ? Buffer.byteLength(piece, "utf8") : piece.byteLength;
  }
  const out = bodyBuffer(size);
  let pos = 0;
  for (let i = 0; i < pieces.length; i++) {
    const piece = pieces[i];
    if (typeof piece !== "string") {
      out.set(piece, pos);
      pos += piece.byteLength;
    } else if (piece.length <= SHORT_TEXT && isAscii(piece)) {
      for (let j = 0; j < piece.length; j++) out[pos++] = piece.charCodeAt(j);
    } else pos += out.write(piece, pos, "utf8");
  }
  return out;
}

function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return false;
  return true;
}
