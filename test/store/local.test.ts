import { describeStoreConformance } from "./conformance.js";
import { LocalStore } from "../../src/store/local.js";

describeStoreConformance("local", async (limits) => new LocalStore(limits), { persistent: false, shared: false, retains: true });
