/**
 * The one way Engram talks to an operator's OpenAI-compatible endpoint
 * (embeddings, extraction): the official `openai` client, told everything
 * explicitly so that nothing leaks in from the server's environment.
 */
import OpenAI from "openai";

/** Where the endpoint is and how long to wait for it. */
export interface EndpointSettings {
  /** Base URL (…/v1). */
  url: string;
  /** Bearer key; absent: no Authorization header at all. */
  apiKey?: string;
  /** Longest wait for one attempt, in ms. */
  timeoutMs: number;
  /** Retries the library makes of a failed attempt. */
  maxRetries: number;
}

/** An `openai` client for the endpoint. */
export function openAICompatibleClient(settings: EndpointSettings): OpenAI {
  return new OpenAI({
    baseURL: settings.url,
    // The library insists on a key; without one the header is removed, so nothing is sent.
    apiKey: settings.apiKey ?? "unused",
    defaultHeaders: settings.apiKey === undefined ? { Authorization: null } : undefined,
    // Explicit, so that OPENAI_API_KEY, OPENAI_ORG_ID and OPENAI_PROJECT_ID in the server's environment never reach this endpoint.
    organization: null,
    project: null,
    timeout: settings.timeoutMs,
    maxRetries: settings.maxRetries,
    // Never print on its own: every failure becomes a MemoryError that keeps the library's error as its cause.
    logLevel: "off",
  });
}
