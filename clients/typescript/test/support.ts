/** What the client's suites share. */
import { expect } from "vitest";
import { ConnectError } from "../src/index.js";

/** The client's ConnectError of a rejected call; fails when the call succeeds. */
export async function errorOf(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ConnectError);
    return err as ConnectError;
  }
  throw new Error("expected the call to fail, but it succeeded");
}
