/**
 * gRPC server reflection (grpc.reflection.v1 and v1alpha), so grpcurl and
 * `buf curl` can discover and call the API. It serves the exact descriptors
 * that buf generated: our contract and the google.rpc error details its
 * errors carry (from the TypeScript client package, which owns the one
 * generated copy; the details so that grpcurl and `buf curl` can decode an
 * error's BadRequest, ErrorInfo and RetryInfo), and health and reflection
 * (src/gen).
 * @grpc/reflection is not used: it rebuilds descriptors through protobufjs,
 * losing imports and qualified type names, which those tools reject.
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import type { GenFile } from "@bufbuild/protobuf/codegenv2";
import { FileDescriptorProtoSchema, type DescriptorProto } from "@bufbuild/protobuf/wkt";
import { file_engram_v1_memory } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { file_google_rpc_error_details } from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { file_health_v1_health } from "../gen/health/v1/health_pb.js";
import {
  file_grpc_reflection_v1_reflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import { file_grpc_reflection_v1alpha_reflection } from "../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** Serialized descriptors by file name, each file's imports, and the file of every symbol. */
class DescriptorIndex {
  private readonly files = new Map<string, { bytes: Uint8Array; deps: string[] }>();
  private readonly symbols = new Map<string, string>();
  readonly services: string[] = [];

  addFile(file: GenFile): void {
    for (const dep of file.dependencies) this.addFile(dep as GenFile);
    if (this.files.has(file.proto.name)) return;
    // protobuf-es embeds descriptors with `dependency` emptied (it links GenFiles instead); restore the names.
    const fd = create(FileDescriptorProtoSchema, {
      ...file.proto,
      dependency: file.dependencies.map((d) => d.proto.name),
    });
    this.files.set(fd.name, { bytes: toBinary(FileDescriptorProtoSchema, fd), deps: fd.dependency });
    const prefix = fd.package ? `${fd.package}.` : "";
    const addMessages = (scope: string, list: DescriptorProto[]) => {
      for (const m of list) {
        this.symbols.set(`${scope}${m.name}`, fd.name);
        for (const e of m.enumType) this.symbols.set(`${scope}${m.name}.${e.name}`, fd.name);
        addMessages(`${scope}${m.name}.`, m.nestedType);
      }
    };
    addMessages(prefix, fd.messageType);
    for (const e of fd.enumType) this.symbols.set(`${prefix}${e.name}`, fd.name);
    for (const s of fd.service) {
      this.symbols.set(`${prefix}${s.name}`, fd.name);
      for (const m of s.method) this.symbols.set(`${prefix}${s.name}.${m.name}`, fd.name);
      this.services.push(`${prefix}${s.name}`);
    }
  }

  fileOfSymbol(symbol: string): string | undefined {
    return this.symbols.get(symbol.replace(/^\./, ""));
  }

  /** The file and everything it imports, dependencies first; undefined when unknown. */
  closure(name: string | undefined): Uint8Array[] | undefined {
    if (name === undefined || !this.files.has(name)) return undefined;
    const order: string[] = [];
    const visit = (n: string) => {
      if (order.includes(n) || !this.files.has(n)) return;
      for (const d of this.files.get(n)!.deps) visit(d);
      order.push(n);
    };
    visit(name);
    return order.map((n) => this.files.get(n)!.bytes);
  }
}

function answer(index: DescriptorIndex, req: ServerReflectionRequest): ServerReflectionResponse {
  const reply = (messageResponse: MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"]) =>
    create(ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse });
  const descriptors = (files: Uint8Array[] | undefined, what: string) =>
    files
      ? reply({ case: "fileDescriptorResponse", value: { fileDescriptorProto: files } })
      : reply({
          case: "errorResponse",
          value: { errorCode: grpc.status.NOT_FOUND, errorMessage: `${what} not found` },
        });
  const r = req.messageRequest;
  switch (r.case) {
    case "listServices":
      return reply({ case: "listServicesResponse", value: { service: index.services.map((name) => ({ name })) } });
    case "fileByFilename":
      return descriptors(index.closure(r.value), `file ${r.value}`);
    case "fileContainingSymbol":
      return descriptors(index.closure(index.fileOfSymbol(r.value)), `symbol ${r.value}`);
    default:
      // The contract defines no extensions.
      return reply({
        case: "errorResponse",
        value: { errorCode: grpc.status.UNIMPLEMENTED, errorMessage: "extensions are not supported" },
      });
  }
}

/** Adds grpc.reflection.v1 and v1alpha (same wire format) to a grpc-js server. */
export function addReflection(server: grpc.Server): void {
  const index = new DescriptorIndex();
  for (const file of [
    file_engram_v1_memory,
    file_google_rpc_error_details,
    file_health_v1_health,
    file_grpc_reflection_v1_reflection,
    file_grpc_reflection_v1alpha_reflection,
  ]) {
    index.addFile(file);
  }
  for (const pkg of ["grpc.reflection.v1", "grpc.reflection.v1alpha"]) {
    const definition: grpc.ServiceDefinition = {
      ServerReflectionInfo: {
        path: `/${pkg}.ServerReflection/ServerReflectionInfo`,
        requestStream: true,
        responseStream: true,
        requestDeserialize: (b: Buffer) => fromBinary(ServerReflectionRequestSchema, b),
        requestSerialize: (m: ServerReflectionRequest) => Buffer.from(toBinary(ServerReflectionRequestSchema, m)),
        responseSerialize: (m: ServerReflectionResponse) => Buffer.from(toBinary(ServerReflectionResponseSchema, m)),
        responseDeserialize: (b: Buffer) => fromBinary(ServerReflectionResponseSchema, b),
      },
    };
    server.addService(definition, {
      ServerReflectionInfo: (call: grpc.ServerDuplexStream<ServerReflectionRequest, ServerReflectionResponse>) => {
        call.on("data", (req: ServerReflectionRequest) => call.write(answer(index, req)));
        call.on("end", () => call.end());
        call.on("error", () => call.end());
      },
    });
  }
}
