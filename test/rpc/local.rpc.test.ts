import { describeRpcSuite } from "./suite.js";

describeRpcSuite("local");
