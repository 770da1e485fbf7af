// An example Switchyard client in TypeScript, on the generated stubs in
// gen/ts and @connectrpc/connect-node speaking the gRPC protocol to the
// registry and the router. Every answer is printed as one line of protobuf
// JSON (the canonical mapping, so any language can read it back):
//
//   client.ts list  [--namespace NS]
//       ListInstances, then ListModels.
//   client.ts watch [--namespace NS] [--resume-revision R] [--max-responses N]
//       WatchInstances: a snapshot first, then events; with --resume-revision
//       the events after R and no snapshot (unless R was compacted, when the
//       registry sends a fresh snapshot that says so). Reconnects from the
//       last revision it printed when the stream breaks.
//   client.ts route --model M --tokens 1,2,3 [--request-id ID]
//       Route, then Free: which instance the router picks for these tokens.
//
// --registry-addr and --router-addr (host:port) say where the services are;
// SWITCHYARD_REGISTRY_ADDR and SWITCHYARD_ROUTER_ADDR too. --auth-token (or
// SWITCHYARD_AUTH_TOKEN) is sent as a bearer token on every call, for
// services run with --auth-token-file.
import { parseArgs } from "node:util";
import { type DescMessage, type MessageShape, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  ListInstancesResponseSchema,
  ListModelsResponseSchema,
  RegistryService,
  WatchInstancesResponseSchema,
  WatchResponseKind,
} from "../../../gen/ts/switchyard/registry/v1/registry_pb.js";
import { RouteResponseSchema, RouterService } from "../../../gen/ts/switchyard/router/v1/router_pb.js";

function print<D extends DescMessage>(schema: D, msg: MessageShape<D>): void {
  process.stdout.write(toJsonString(schema, msg) + "\n");
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    "registry-addr": { type: "string", default: process.env.SWITCHYARD_REGISTRY_ADDR ?? "localhost:7001" },
    "router-addr": { type: "string", default: process.env.SWITCHYARD_ROUTER_ADDR ?? "localhost:7003" },
    namespace: { type: "string", default: "" },
    "resume-revision": { type: "string", default: "0" },
    "max-responses": { type: "string", default: "0" },
    model: { type: "string", default: "" },
    tokens: { type: "string", default: "" },
    "request-id": { type: "string", default: "" },
    "auth-token": { type: "string", default: process.env.SWITCHYARD_AUTH_TOKEN ?? "" },
  },
});

const bearer: Interceptor = (next) => async (req) => {
  req.header.set("authorization", `Bearer ${values["auth-token"]}`);
  return next(req);
};
const grpc = (addr: string) => createGrpcTransport({ baseUrl: `http://${addr}`, interceptors: values["auth-token"] ? [bearer] : [] });
const registry = createClient(RegistryService, grpc(values["registry-addr"]!));
const filter = { namespace: values.namespace };

async function list(): Promise<void> {
  print(ListInstancesResponseSchema, await registry.listInstances({ filter }, { timeoutMs: 10_000 }));
  print(ListModelsResponseSchema, await registry.listModels({ filter: { namespace: values.namespace } }, { timeoutMs: 10_000 }));
}

async function watch(): Promise<void> {
  let revision = BigInt(values["resume-revision"]!);
  const max = Number(values["max-responses"]);
  const ac = new AbortController();
  process.on("SIGINT", () => ac.abort());
  process.on("SIGTERM", () => ac.abort());
  let printed = 0;
  for (let backoff = 50; !ac.signal.aborted; backoff = Math.min(backoff * 2, 5000)) {
    try {
      for await (const r of registry.watchInstances({ filter, resumeRevision: revision }, { signal: ac.signal })) {
        backoff = 50;
        print(WatchInstancesResponseSchema, r);
        // Progress and events both move the revision on: a reconnect
        // resumes after the last one seen, so no event is lost or repeated.
        if (r.kind !== WatchResponseKind.UNSPECIFIED) revision = r.revision;
        if (max > 0 && ++printed >= max) return ac.abort();
      }
    } catch (err) {
      if (ac.signal.aborted) return;
      const ce = ConnectError.from(err);
      if (ce.code !== Code.Unavailable && ce.code !== Code.Internal) throw err;
      process.stderr.write(`watch broke (${ce.message}); resuming after revision ${revision}\n`);
      await new Promise((resolve) => setTimeout(resolve, backoff));
    }
  }
}

async function route(): Promise<void> {
  if (!values.model || !values.tokens) throw new Error("route needs --model and --tokens");
  const router = createClient(RouterService, grpc(values["router-addr"]!));
  const tokenIds = values.tokens.split(",").map((t) => Number(t.trim()));
  const requestId = values["request-id"] || crypto.randomUUID();
  const r = await router.route({ requestId, target: { kind: { case: "model", value: values.model } }, tokenIds }, { timeoutMs: 10_000 });
  print(RouteResponseSchema, r);
  // This client only asked; it sends nothing to the worker, so it frees the
  // load the router recorded for the decision at once.
  await router.free({ requestId }, { timeoutMs: 10_000 });
}

const commands: Record<string, () => Promise<void>> = { list, watch, route };
const cmd = commands[positionals[0] ?? ""];
if (!cmd) {
  process.stderr.write("usage: client.ts list|watch|route [flags] (see the comment at the top of src/client.ts)\n");
  process.exit(2);
}
cmd().then(
  () => process.exit(0),
  (err) => {
    const ce = ConnectError.from(err);
    process.stderr.write(`node-client: ${Code[ce.code]}: ${ce.rawMessage}\n`);
    process.exit(1);
  },
);
