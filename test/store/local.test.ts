import { describeStoreConformance } from "./conformance.js";
import { describeMemoriesConformance } from "./memories-conformance.js";
import { LocalStore } from "../../src/store/local.js";

describeStoreConformance("local", async (limits) => new LocalStore(limits), {
  persistent: false,
  shared: false,
  retains: true,
});
describeMemoriesConformance("local", async () => new LocalStore({ maxSessions: 1000, maxSessionEvents: 500 }));
