/**
 * The one text analyzer of long-term memory: what every store indexes of a
 * memory's (or an event's) text and how a query is matched against it, so
 * that "seat" finds "seats", "Café" in NFD finds "Café" in NFC and "太郎"
 * finds "私の名前は太郎です" on every store alike.
 *
 * The steps, in order:
 * 1. Unicode NFKC, so compatibility forms (full-width letters, ligatures,
 *    composed and decomposed accents) index as one.
 * 2. Case folding (upper then lower case, so "ß" and "SS" meet).
 * 3. Word segmentation: runs of letters, marks, digits and apostrophes;
 *    a run in a script written without spaces (Han, kana, Hangul, Thai,
 *    Lao, Khmer, Myanmar) is split further by ICU's word boundaries
 *    (Intl.Segmenter), which segment Chinese and Japanese by dictionary.
 *    ICU is left to those runs because it costs ~9 µs a word, four times
 *    the rest of the analysis.
 * 4. English stop words (the `stopword` package's list) are dropped.
 * 5. Words in ASCII letters are stemmed with Snowball's English stemmer
 *    (Porter2, `wink-porter2-stemmer`); other scripts are kept as segmented.
 * 6. What is left is split into runs of letters, marks and digits, so a term
 *    never holds a character an engine's own tokenizer would split on.
 *
 * Stores hand engines that analyze text themselves (PostgreSQL's text
 * search, the Redis Query Engine) the terms joined by spaces, under a
 * configuration that neither stems nor drops words again, so they match
 * exactly what this module produced.
 */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const stemEnglish: (word: string) => string = require("wink-porter2-stemmer");
const stopWords: ReadonlySet<string> = new Set((require("stopword") as { eng: string[] }).eng);

/**
 * Changes whenever analyze's output changes for some text: a store that
 * keeps analyzed text of another version re-indexes it.
 */
export const ANALYZER_VERSION = 1;

const segmenter = new Intl.Segmenter("en", { granularity: "word" });
const WORD_RUN = /[\p{L}\p{M}\p{N}'\u2019]+/gu;
const UNSPACED_SCRIPT =
  /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}\p{Script=Myanmar}]/u;
const ASCII_WORD = /^[a-z0-9]+$/;
const TERM_RUN = /[\p{L}\p{M}\p{N}]+/gu;
const APOSTROPHES = /['\u2019]/g;
/** Any UTF-16 unit outside ASCII (surrogates included). */
const NON_ASCII = /[\u0080-\uffff]/;
/** WORD_RUN over lower-cased ASCII. */
const ASCII_WORD_RUN = /[a-z0-9']+/g;

/**
 * Stems of the words seen last. Snowball costs ~4 µs a word and a text's
 * vocabulary repeats, so a bounded memo (dropped whole when full) saves
 * most of it.
 */
const stems = new Map<string, string>();
const STEMS_KEPT = 50_000;

function stemOf(word: string): string {
  let stem = stems.get(word);
  if (stem === undefined) {
    if (stems.size >= STEMS_KEPT) stems.clear();
    stem = stemEnglish(word);
    stems.set(word, stem);
  }
  return stem;
}

/** The words of a folded text, in order. */
function* wordsOf(folded: string): Generator<string> {
  for (const [run] of folded.matchAll(WORD_RUN)) {
    if (!UNSPACED_SCRIPT.test(run)) {
      yield run;
      continue;
    }
    for (const { segment, isWordLike } of segmenter.segment(run)) if (isWordLike) yield segment;
  }
}

/** NFKC and case folding: the form analyze compares text in. */
export function foldText(text: string): string {
  return text.normalize("NFKC").toUpperCase().toLowerCase().normalize("NFKC");
}

/**
 * The terms of a text, in order (repeats kept, for term frequencies).
 *
 * Every memory written is analyzed, so ASCII text (most of it) takes a
 * shorter road to the same terms: NFKC leaves ASCII as it is and no ASCII
 * letter folds outside ASCII, so lower-casing is the whole fold, no word is
 * in an unspaced script, and a stem of ASCII letters is one term already.
 * That road took analysis from ~17 to ~6 µs a memory; a test holds it to the
 * full one.
 */
export function analyze(text: string): string[] {
  const terms: string[] = [];
  const words = !NON_ASCII.test(text) ? (text.toLowerCase().match(ASCII_WORD_RUN) ?? []) : wordsOf(foldText(text));
  for (const segment of words) {
    if (stopWords.has(segment)) continue;
    const word = segment.includes("'") || segment.includes("\u2019") ? segment.replace(APOSTROPHES, "") : segment;
    if (word.length === 0 || stopWords.has(word)) continue;
    const stemmed = ASCII_WORD.test(word) ? stemOf(word) : word;
    if (ASCII_WORD.test(stemmed)) terms.push(stemmed);
    else for (const run of stemmed.matchAll(TERM_RUN)) terms.push(run[0]);
  }
  return terms;
}

/** The distinct terms of a query, in their first order. */
export function queryTerms(query: string): string[] {
  return [...new Set(analyze(query))];
}

/** analyze's terms joined by single spaces: what a store hands an engine to index. */
export function analyzedText(text: string): string {
  return analyze(text).join(" ");
}
