/**
 * ConnectingStore forwards every call to the store it opened: the whole
 * conformance suite runs through it (over a local store), so a method or an
 * argument it fails to pass on shows here.
 */
import { describeStoreConformance } from "./conformance.js";
import { ConnectingStore } from "../../src/store/connecting.js";
import { LocalStore } from "../../src/store/local.js";

describeStoreConformance(
  "connecting (once opened, over local)",
  async (limits) => {
    const store = new ConnectingStore("local", async () => new LocalStore(limits), { failed: () => {}, opened: () => {} });
    await store.opened;
    return store;
  },
  { persistent: false, shared: false, retains: true },
);
