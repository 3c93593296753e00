/**
 * gRPC server reflection (v1 and v1alpha), so grpcurl and `buf curl` can
 * discover the API. Built from the descriptors embedded in the generated code,
 * so it always matches what we serve.
 */
import * as protoLoader from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
import { create, toBinary } from "@bufbuild/protobuf";
import type { GenFile } from "@bufbuild/protobuf/codegenv2";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { protoPath as healthProtoPath } from "grpc-health-check";
import type { Server } from "@grpc/grpc-js";
import { file_engram_v1_memory } from "../gen/engram/v1/memory_pb.js";

/** Every file the contract depends on, dependencies first. */
function fileClosure(root: GenFile): GenFile[] {
  const out: GenFile[] = [];
  const visit = (f: GenFile) => {
    if (out.includes(f)) return;
    for (const dep of f.dependencies) visit(dep as GenFile);
    out.push(f);
  };
  visit(root);
  return out;
}

/** Adds the reflection service, describing MemoryService and grpc.health.v1, to a grpc-js server. */
export function addReflection(server: Server): void {
  const set = create(FileDescriptorSetSchema, { file: fileClosure(file_engram_v1_memory).map((f) => f.proto) });
  const definition = protoLoader.loadFileDescriptorSetFromBuffer(Buffer.from(toBinary(FileDescriptorSetSchema, set)));
  const health = protoLoader.loadSync(healthProtoPath);
  new ReflectionService({ ...health, ...definition }).addToServer(server);
}
