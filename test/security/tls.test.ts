/**
 * TLS and mutual TLS on the one port: gRPC (ALPN h2) and Connect over
 * HTTP/1.1 (ALPN http/1.1) both work over TLS; with a client CA configured a
 * client without a certificate signed by it cannot even finish the handshake.
 * Certificates are made for the test by openssl (Debian's package).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import https from "node:https";
import { tmpdir } from "node:os";
import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf, grpcJsClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let dir: string;
/** Name the certificate is checked against (SNI may not carry an IP address). */
const SNI = { "grpc.ssl_target_name_override": "localhost", "grpc.default_authority": "localhost" };
const file = (name: string) => path.join(dir, name);

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
}

/** A CA, a server certificate for 127.0.0.1/localhost, and a client certificate. */
function makeCertificates(): void {
  openssl(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=engram test CA",
  );
  writeFileSync(file("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  openssl(
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "server.key",
    "-out",
    "server.csr",
    "-subj",
    "/CN=localhost",
  );
  openssl(
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.pem",
    "-days",
    "2",
    "-extfile",
    "server.ext",
  );
  openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=agent");
  openssl(
    "x509",
    "-req",
    "-in",
    "client.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "client.pem",
    "-days",
    "2",
  );
}

/** POST a Connect JSON call over HTTPS (HTTP/1.1); resolves with status and body, rejects on a TLS failure. */
function connectOverHttps(
  port: number,
  method: string,
  body: unknown,
  tlsOptions: https.RequestOptions,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: "127.0.0.1",
        port,
        method: "POST",
        path: `/engram.v1.MemoryService/${method}`,
        headers: { "content-type": "application/json" },
        ...tlsOptions,
      },
      (res) => {
        let text = "";
        res.on("data", (d) => (text += d));
        res.on("end", () => resolve({ status: res.statusCode!, body: text }));
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-tls-"));
  makeCertificates();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("TLS", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ config: { tlsCert: file("server.pem"), tlsKey: file("server.key") } });
  });
  afterAll(() => server?.stop());

  it("serves gRPC (h2) and Connect (HTTP/1.1) over TLS on the one port", async () => {
    const client = grpcJsClient(server.address, {
      credentials: grpc.credentials.createSsl(readFileSync(file("ca.pem"))),
      options: SNI,
    });
    try {
      const created = await client.createSession({ appName: "tls", userId: "u", sessionId: "tls-1" });
      expect(created.session?.sessionId).toBe("tls-1");
    } finally {
      client.close();
    }
    const res = await connectOverHttps(
      server.port,
      "GetSession",
      { session_id: "tls-1" },
      { ca: readFileSync(file("ca.pem")) },
    );
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).session.app_name).toBe("tls");
  });

  it("refuses cleartext on a TLS port without disturbing it", async () => {
    const plain = grpcJsClient(server.address);
    try {
      expect((await errorOf(plain.getStats({}, { timeoutMs: 3000 }))).code).toBe(Code.Unavailable);
    } finally {
      plain.close();
    }
    const res = await connectOverHttps(server.port, "GetStats", {}, { ca: readFileSync(file("ca.pem")) });
    expect(res.status).toBe(200);
  });
});

describe("mutual TLS", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({
      config: { tlsCert: file("server.pem"), tlsKey: file("server.key"), tlsClientCa: file("ca.pem") },
    });
  });
  afterAll(() => server?.stop());

  it("accepts a client certificate signed by the client CA, on both protocols", async () => {
    const creds = grpc.credentials.createSsl(
      readFileSync(file("ca.pem")),
      readFileSync(file("client.key")),
      readFileSync(file("client.pem")),
    );
    const client = grpcJsClient(server.address, { credentials: creds, options: SNI });
    try {
      expect((await client.getStats({})).backend).toBe("local");
    } finally {
      client.close();
    }
    const res = await connectOverHttps(
      server.port,
      "GetStats",
      {},
      {
        ca: readFileSync(file("ca.pem")),
        key: readFileSync(file("client.key")),
        cert: readFileSync(file("client.pem")),
      },
    );
    expect(res.status).toBe(200);
  });

  it("refuses a client without a certificate", async () => {
    const client = grpcJsClient(server.address, {
      credentials: grpc.credentials.createSsl(readFileSync(file("ca.pem"))),
      options: SNI,
    });
    try {
      expect((await errorOf(client.getStats({}, { timeoutMs: 3000 }))).code).toBe(Code.Unavailable);
    } finally {
      client.close();
    }
    await expect(connectOverHttps(server.port, "GetStats", {}, { ca: readFileSync(file("ca.pem")) })).rejects.toThrow();
  });
});
