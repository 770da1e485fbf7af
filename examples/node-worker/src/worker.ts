// An example Switchyard worker in TypeScript, built on the generated stubs in
// gen/ts only (nothing in it comes from the Go SDK).
//
// It serves generate on the http request plane (an echo engine), registers
// with the registry on a lease it keeps alive, uploads its tokenizer to the
// eventbus object store and publishes a model card that references it, and
// publishes KV cache events and load. A lease that is truly lost is replaced:
// the worker registers again under a new lease and keeps serving. SIGTERM or
// SIGINT deregisters at once, lets in-flight requests finish within
// --drain-timeout and exits 0. See README.md.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  EventBusService,
  EventSchema,
  type PutObjectRequest,
  PutObjectRequestSchema,
} from "../../../gen/ts/switchyard/eventbus/v1/eventbus_pb.js";
import {
  InstanceSchema,
  ModelCardSchema,
  RegistryService,
  type TokenizerArtifact,
  TokenizerArtifactSchema,
} from "../../../gen/ts/switchyard/registry/v1/registry_pb.js";
import { Role } from "../../../gen/ts/switchyard/common/v1/common_pb.js";
import { type KvEventBatch, KvEventBatchSchema, LoadMetricsSchema } from "../../../gen/ts/switchyard/worker/v1/worker_pb.js";
import { EchoEngine } from "./engine.js";
import { Hasher } from "./kvhash.js";
import { jittered, Lease, MAX_BACKOFF_MS, MIN_BACKOFF_MS } from "./lease.js";
import { log } from "./log.js";
import { Server } from "./requestplane.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** ROLES maps --disaggregation-mode to the registered role (pkg/wire's role names). */
export const ROLES: Record<string, Role> = { agg: Role.AGG, prefill: Role.PREFILL, decode: Role.DECODE };

// Wire conventions shared with pkg/worker (written in the protos).
export const KV_EVENTS_NAME = "kv_cache_update";
export const LOAD_NAME = "load_metrics";
export const TOKENIZER_BUCKET = "tokenizers";
/** TYPE_HEADER names an event's payload type (its fully qualified proto name), as pkg/wire.HeaderType. */
export const TYPE_HEADER = "Switchyard-Type";
/** subject is an event subject, {namespace}.{component}.{name}, as pkg/wire.Subject. */
export function subject(namespace: string, component: string, name: string): string {
  return `${namespace}.${component}.${name}`;
}
/** kvEventsMsgId is a KV event batch's msg id, as pkg/wire.KVEventsMsgID: a batch published again is stored once. */
export function kvEventsMsgId(instanceId: bigint, dpRank: number, firstEventId: bigint): string {
  return `kv-${instanceId.toString(16)}-${dpRank}-${firstEventId}`;
}
const TOKENIZER_FILES = ["tokenizer.json", "tokenizer.json.gz", "tokenizer_config.json"];
// Errors no retry of a registration step or a KV publish can change: the worker's settings or credentials are wrong
// (or a batch is over the eventbus's limit).
const FINAL = new Set([Code.InvalidArgument, Code.PermissionDenied, Code.Unauthenticated, Code.Unimplemented, Code.FailedPrecondition]);

const ENV_PREFIX = "SWITCHYARD_NODEWORKER_";
// Flags whose variables keep the names Switchyard's Go side uses.
const NAMED_ENV: Record<string, string> = {
  "http-host": "DYN_HTTP_RPC_HOST",
  "http-port": "DYN_HTTP_RPC_PORT",
  "http-root-path": "DYN_HTTP_RPC_ROOT_PATH",
  "max-message-size": "DYN_TCP_MAX_MESSAGE_SIZE",
  "auth-token": "SWITCHYARD_AUTH_TOKEN",
};

const FLAGS = {
  namespace: { default: "dynamo", help: "registry namespace" },
  component: { default: "backend", help: "registry component" },
  endpoint: { default: "generate", help: "registry endpoint" },
  "model-name": { default: "switchyard/node-echo", help: "model name on the model card" },
  "disaggregation-mode": { default: "agg", help: "the role registered: agg, prefill or decode (this example serves whole requests, whatever its role)" },
  "block-size": { default: "16", help: "KV block size in tokens" },
  "context-length": { default: "40960", help: "context length on the model card" },
  "kv-blocks": { default: "8192", help: "KV blocks the simulated cache holds before evicting" },
  "token-delay": { default: "0.005", help: "seconds between generated tokens" },
  "load-interval": { default: "1", help: "seconds between load metrics publications" },
  "registry-addr": { default: "localhost:7001", help: "registry address, host:port" },
  "eventbus-addr": { default: "localhost:7002", help: "eventbus address, host:port" },
  "lease-ttl": { default: "10", help: "registry lease TTL in seconds (1..300)" },
  "auth-token": { default: "", help: "bearer token sent to the registry and eventbus (SWITCHYARD_AUTH_TOKEN)" },
  "drain-timeout": { default: "30", help: "seconds in-flight requests may take at shutdown" },
  "tokenizer-dir": {
    default: path.resolve(HERE, "../../../pkg/tokenizer/qwen3"),
    help: "directory with tokenizer.json(.gz) and tokenizer_config.json, uploaded and put on the model card; empty: none",
  },
  "http-host": { default: "", help: "address to bind and advertise (DYN_HTTP_RPC_HOST; default: a non-loopback IPv4 of the machine, else 127.0.0.1)" },
  "http-port": { default: "8888", help: "port (DYN_HTTP_RPC_PORT; 0 picks one)" },
  "http-root-path": { default: "/v1/rpc", help: "path prefix of endpoints (DYN_HTTP_RPC_ROOT_PATH)" },
  "max-message-size": { default: String(32 << 20), help: "largest request payload in bytes (DYN_TCP_MAX_MESSAGE_SIZE)" },
} as const;
type Flag = keyof typeof FLAGS;

export interface Config {
  namespace: string;
  component: string;
  endpoint: string;
  modelName: string;
  /** role is the registered role (--disaggregation-mode). */
  role: Role;
  blockSize: number;
  contextLength: number;
  kvBlocks: number;
  tokenDelayMs: number;
  loadIntervalMs: number;
  registryAddr: string;
  eventbusAddr: string;
  leaseTtl: number;
  authToken: string;
  drainTimeoutMs: number;
  tokenizerDir: string;
  httpHost: string;
  httpPort: number;
  httpRootPath: string;
  maxMessageSize: number;
}

class UsageError extends Error {}

/** parseConfig reads flags, then the environment for flags not given, then checks every value. */
export function parseConfig(argv: string[], env: NodeJS.ProcessEnv): Config {
  const options = Object.fromEntries(Object.keys(FLAGS).map((k) => [k, { type: "string" as const }]));
  const { values } = parseArgs({ args: argv, options: { ...options, help: { type: "boolean" } }, strict: true });
  if (values.help) {
    const lines = Object.entries(FLAGS).map(([k, f]) => `  --${k}  ${f.help} (default ${JSON.stringify(f.default)})`);
    process.stdout.write(
      `Example Switchyard worker on the generated TypeScript stubs. Every flag can also be set through ` +
        `${ENV_PREFIX}<FLAG> (upper snake case) or the DYN_* variable named in its help.\n${lines.join("\n")}\n`,
    );
    process.exit(0);
  }
  const raw = (k: Flag): { v: string; from: string } => {
    const given = (values as Record<string, unknown>)[k];
    if (typeof given === "string") return { v: given, from: `--${k}` };
    const name = NAMED_ENV[k] ?? ENV_PREFIX + k.toUpperCase().replaceAll("-", "_");
    if (env[name] !== undefined) return { v: env[name]!, from: name };
    return { v: FLAGS[k].default, from: `--${k}` };
  };
  const str = (k: Flag) => raw(k).v;
  const num = (k: Flag, ok: (n: number) => boolean, want: string) => {
    const { v, from } = raw(k);
    const n = Number(v);
    if (v.trim() === "" || !Number.isFinite(n) || !ok(n)) throw new UsageError(`${from}=${JSON.stringify(v)}: want ${want}`);
    return n;
  };
  const int = (n: number) => Number.isInteger(n);
  const plane = (env.DYN_REQUEST_PLANE ?? "http").trim().toLowerCase();
  if (plane !== "http") {
    throw new UsageError(`DYN_REQUEST_PLANE=${JSON.stringify(env.DYN_REQUEST_PLANE)}: this worker serves the http request plane only (valid: http)`);
  }
  const cfg: Config = {
    namespace: str("namespace"),
    component: str("component"),
    endpoint: str("endpoint"),
    modelName: str("model-name"),
    role: Object.hasOwn(ROLES, str("disaggregation-mode")) ? ROLES[str("disaggregation-mode")] : Role.UNSPECIFIED,
    blockSize: num("block-size", (n) => int(n) && n > 0, "a positive integer"),
    contextLength: num("context-length", (n) => int(n) && n > 0, "a positive integer"),
    kvBlocks: num("kv-blocks", (n) => int(n) && n > 0, "a positive integer"),
    tokenDelayMs: num("token-delay", (n) => n >= 0, "seconds, 0 or more") * 1000,
    loadIntervalMs: num("load-interval", (n) => n > 0, "seconds, more than 0") * 1000,
    registryAddr: str("registry-addr"),
    eventbusAddr: str("eventbus-addr"),
    leaseTtl: num("lease-ttl", (n) => int(n) && n >= 1 && n <= 300, "1..300 seconds"),
    authToken: str("auth-token").trim(),
    drainTimeoutMs: num("drain-timeout", (n) => n >= 0, "seconds, 0 or more") * 1000,
    tokenizerDir: str("tokenizer-dir"),
    httpHost: str("http-host") || detectHost(),
    httpPort: num("http-port", (n) => int(n) && n >= 0 && n <= 65535, "a port, 0..65535"),
    httpRootPath: str("http-root-path"),
    maxMessageSize: num("max-message-size", (n) => int(n) && n > 0, "a positive number of bytes"),
  };
  if (cfg.role === Role.UNSPECIFIED) {
    const { v, from } = raw("disaggregation-mode");
    throw new UsageError(`${from}=${JSON.stringify(v)}: want one of ${Object.keys(ROLES).join(", ")}`);
  }
  const name = /^[a-z0-9][a-z0-9_-]*$/;
  for (const k of ["namespace", "component", "endpoint"] as const) {
    if (!name.test(cfg[k])) throw new UsageError(`--${k}=${JSON.stringify(cfg[k])}: want a name matching ${name.source}`);
  }
  if (!cfg.httpRootPath.startsWith("/")) throw new UsageError(`DYN_HTTP_RPC_ROOT_PATH=${JSON.stringify(cfg.httpRootPath)}: want a path starting with /`);
  return cfg;
}

/** detectHost is a non-loopback IPv4 address of this machine, or 127.0.0.1. */
function detectHost(): string {
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  }
  return "127.0.0.1";
}

/** objectName is where a model's tokenizer file lives in the bucket, as pkg/worker names it. */
export function objectName(model: string, file: string): string {
  return model.replaceAll("/", "--").replaceAll(" ", "_") + "/" + file;
}

/** uploadTokenizer stores the tokenizer files of dir in the object store and returns the model card's artifacts. */
async function uploadTokenizer(bus: Client<typeof EventBusService>, cfg: Config): Promise<TokenizerArtifact[]> {
  if (cfg.tokenizerDir === "") return [];
  const files = TOKENIZER_FILES.filter((f) => existsSync(path.join(cfg.tokenizerDir, f)));
  if (!files.some((f) => f.startsWith("tokenizer.json"))) throw new Error(`tokenizer directory ${cfg.tokenizerDir} has no tokenizer.json`);
  const out: TokenizerArtifact[] = [];
  for (const file of files) {
    const data = readFileSync(path.join(cfg.tokenizerDir, file));
    const sha256 = createHash("sha256").update(data).digest("hex");
    const name = objectName(cfg.modelName, file);
    async function* parts(): AsyncGenerator<PutObjectRequest> {
      // The expected sha256 makes the eventbus refuse a corrupted upload.
      yield create(PutObjectRequestSchema, { part: { case: "header", value: { bucket: TOKENIZER_BUCKET, name, sha256 } } });
      for (let off = 0; off < data.length; off += 256 << 10) {
        yield create(PutObjectRequestSchema, { part: { case: "chunk", value: data.subarray(off, off + (256 << 10)) } });
      }
    }
    const resp = await bus.putObject(parts(), { timeoutMs: 30_000 });
    out.push(
      create(TokenizerArtifactSchema, {
        name: file,
        sha256: resp.info?.sha256 || sha256,
        size: BigInt(resp.info?.size ?? data.length),
        objectKey: `${TOKENIZER_BUCKET}/${name}`,
      }),
    );
  }
  return out;
}

/**
 * KvPublisher publishes KvEventBatch messages in order, one eventbus Publish
 * each, on {namespace}.{component}.kv_cache_update with the msg id
 * kv-{instance hex}-{dp rank}-{first event id} (as pkg/worker does), so that
 * a retried publish is stored once, and the Switchyard-Type header.
 */
class KvPublisher {
  private queue: KvEventBatch[] = [];
  private running: Promise<void> | undefined;
  private closing = false;

  constructor(
    private readonly bus: Client<typeof EventBusService>,
    private readonly subject: string,
  ) {}

  publish(b: KvEventBatch): void {
    this.queue.push(b);
    this.running ??= this.run().finally(() => (this.running = undefined));
  }

  private async run(): Promise<void> {
    for (let b = this.queue.shift(); b; b = this.queue.shift()) {
      const msgId = kvEventsMsgId(b.instanceId, b.dpRank, b.firstEventId);
      const event = create(EventSchema, {
        subject: this.subject,
        payload: toBinary(KvEventBatchSchema, b),
        msgId,
        headers: { [TYPE_HEADER]: KvEventBatchSchema.typeName },
      });
      for (let backoff = MIN_BACKOFF_MS, attempt = 1; ; backoff = Math.min(backoff * 2, 2000), attempt++) {
        try {
          await this.bus.publish({ event }, { timeoutMs: 10_000 });
          break;
        } catch (err) {
          const ce = ConnectError.from(err);
          // Anything else is retried (the msg id keeps a batch stored once):
          // an eventbus that stops or restarts cuts the call, which reaches
          // here as Canceled ("http/2 stream closed with error code CANCEL")
          // or Aborted (a reset connection), not only as Unavailable; those
          // batches were dropped for good.
          if (FINAL.has(ce.code) || this.closing) {
            log.error("KV events not published", { events: b.events.length, err: ce.message });
            break;
          }
          // Retried for as long as it takes, but not silently: a worker
          // whose events never reach the stream says so.
          if (attempt === 1 || attempt % 10 === 0) {
            log.warn("KV events publish failed; retrying", { events: b.events.length, first_event_id: Number(b.firstEventId), attempt, err: ce.message });
          }
          await sleep(jittered(backoff));
        }
      }
    }
  }

  /** close publishes what is queued, retrying for at most timeoutMs. */
  async close(timeoutMs: number): Promise<void> {
    const t = setTimeout(() => (this.closing = true), timeoutMs);
    await this.running;
    clearTimeout(t);
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function main(): Promise<number> {
  let cfg: Config;
  try {
    cfg = parseConfig(process.argv.slice(2), process.env);
  } catch (err) {
    if (!(err instanceof UsageError) && !(err instanceof TypeError)) throw err;
    process.stderr.write(`node-worker: ${(err as Error).message}\n`);
    return 2;
  }
  log.info("config", { ...cfg, authToken: cfg.authToken ? "<set>" : "" });

  let stopping = false;
  let wakeStop: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (wakeStop = resolve));
  for (const sig of ["SIGTERM", "SIGINT"] as const) {
    process.on(sig, () => {
      stopping = true;
      wakeStop();
    });
  }

  // The bearer token, when set, goes on every call (as Go's authtoken.Bearer).
  const bearer: Interceptor = (next) => async (req) => {
    req.header.set("authorization", `Bearer ${cfg.authToken}`);
    return next(req);
  };
  const interceptors = cfg.authToken ? [bearer] : [];
  const registry = createClient(RegistryService, createGrpcTransport({ baseUrl: `http://${cfg.registryAddr}`, interceptors }));
  const bus = createClient(EventBusService, createGrpcTransport({ baseUrl: `http://${cfg.eventbusAddr}`, interceptors }));
  const publisher = new KvPublisher(bus, subject(cfg.namespace, cfg.component, KV_EVENTS_NAME));
  const engine = new EchoEngine(cfg, await Hasher.create(), (b) => publisher.publish(b));
  const server = new Server({
    host: cfg.httpHost,
    port: cfg.httpPort,
    rootPath: cfg.httpRootPath,
    maxMessageSize: cfg.maxMessageSize,
    handlers: new Map([[cfg.endpoint, engine.generate]]),
    onError: (msg, err) => log.error(msg, { err: String(err) }),
  });

  let lease: Lease | undefined;
  let code = 0;
  let loadTimer: NodeJS.Timeout | undefined;
  try {
    const artifacts = (await retry(() => uploadTokenizer(bus, cfg), () => stopping, "tokenizer upload")) ?? [];
    await server.start();
    // register grants a lease and puts the instance and its model card on
    // it. The engine's KV events name the new instance from before it is
    // registered the first time (nobody calls the worker before it shows,
    // and a request that comes as soon as it shows must publish under its
    // id), and from its registration on a new lease, before the card, after
    // a lost lease: requests still running publish meanwhile, and an event
    // of an instance the registry does not list yet makes a router ask the
    // registry, hear no, and drop that instance's events for good as a
    // departed worker's.
    let registered = false;
    // register returns undefined when the worker stopped before its card
    // was stored: a shutdown during a registration is no failure.
    const register = async (): Promise<Lease | undefined> => {
      const granted = await registry.grantLease({ ttlSeconds: BigInt(cfg.leaseTtl) }, { timeoutMs: 10_000 });
      const l = new Lease(registry, granted.leaseId, Number(granted.ttlSeconds), granted.leaseToken);
      try {
        if (!registered) engine.adopt(l.id);
        const instance = create(InstanceSchema, {
          namespace: cfg.namespace,
          component: cfg.component,
          endpoint: cfg.endpoint,
          transport: { http: server.baseUrl },
          metadata: { worker: "node-example" },
          role: cfg.role,
        });
        await registry.register({ instance, leaseId: l.id }, { timeoutMs: 10_000, headers: l.headers });
        if (registered) engine.reset(l.id);
        const card = create(ModelCardSchema, {
          namespace: cfg.namespace,
          component: cfg.component,
          endpoint: cfg.endpoint,
          instanceId: l.id,
          modelName: cfg.modelName,
          blockSize: cfg.blockSize,
          contextLength: cfg.contextLength,
          tokenizer: artifacts,
        });
        // The card is retried on the lease the instance already holds while
        // a later call may succeed (a registry replica that lost etcd after
        // the instance's call: the next call goes to another). Giving up here
        // would revoke the lease, and every watcher would see a live instance
        // deleted and registered again under a new id.
        const stored = await retry(
          () => registry.registerModel({ card, leaseId: l.id }, { timeoutMs: 10_000, headers: l.headers }),
          () => stopping || l.gone,
          "model card registration on the same lease",
        );
        if (stored === undefined) {
          // Stopping, or the new lease was lost before the card was stored:
          // then it is retried on another, as when the registry is away.
          throw stopping ? stoppedRegistering : new ConnectError("the lease was lost before the model card was stored", Code.Unavailable);
        }
        registered = true;
      } catch (err) {
        await l.close();
        await registry.deregister({ leaseId: l.id }, { timeoutMs: 5000, headers: l.headers }).catch(() => {});
        if (err === stoppedRegistering) return undefined;
        throw err;
      }
      log.info("worker registered", {
        instance: l.id.toString(16),
        endpoint: `${cfg.namespace}/${cfg.component}/${cfg.endpoint}`,
        transport: "http:" + server.baseUrl,
        model: cfg.modelName,
        tokenizer_files: artifacts.length,
      });
      return l;
    };
    lease = await retry(register, () => stopping, "registration");
    loadTimer = setInterval(() => {
      const m = engine.load();
      const event = create(EventSchema, {
        subject: subject(cfg.namespace, cfg.component, LOAD_NAME),
        payload: toBinary(LoadMetricsSchema, m),
        msgId: crypto.randomUUID(),
        headers: { [TYPE_HEADER]: LoadMetricsSchema.typeName },
      });
      bus.publish({ event }, { timeoutMs: 2000 }).catch((err) => log.warn("load not published", { err: ConnectError.from(err).message }));
    }, cfg.loadIntervalMs);
    // A worker never exits because the registry is away: when its lease is
    // truly gone it registers again, under a new lease, and keeps serving.
    while (!stopping && lease) {
      const reason = await Promise.race([lease.lost, stopped.then(() => undefined)]);
      if (reason === undefined) break;
      await lease.close();
      lease = undefined;
      log.warn("registering again after losing the lease", { reason });
      lease = await retry(register, () => stopping, "re-registration");
    }
  } catch (err) {
    log.error("worker failed", { err: (err as Error).message ?? String(err) });
    code = 1;
  } finally {
    log.info("worker shutting down: deregistering, then draining", { drain_timeout_ms: cfg.drainTimeoutMs });
    clearInterval(loadTimer);
    if (lease) {
      await lease.close();
      try {
        await registry.deregister({ leaseId: lease.id }, { timeoutMs: 10_000, headers: lease.headers });
      } catch (err) {
        const ce = ConnectError.from(err);
        if (ce.code !== Code.NotFound) {
          log.error("deregister failed", { err: ce.message });
          code = 1;
        }
      }
    }
    if (!(await server.drain(cfg.drainTimeoutMs))) log.warn("drain timed out; cancelling the remaining requests", { inflight: server.inflight });
    await server.close();
    await publisher.close(10_000);
    log.info("worker stopped", { exit_code: code });
  }
  return code;
}

/** stoppedRegistering ends a registration the worker's shutdown interrupted. */
const stoppedRegistering = new Error("stopped while registering");

/** retry runs f until it succeeds, with jittered exponential backoff on errors but FINAL ones, or returns undefined once stop says so. */
async function retry<T>(f: () => Promise<T>, stop: () => boolean, what: string): Promise<T | undefined> {
  for (let backoff = MIN_BACKOFF_MS; !stop(); backoff = Math.min(backoff * 2, MAX_BACKOFF_MS)) {
    try {
      return await f();
    } catch (err) {
      // Everything but a refusal that a retry cannot change is retried: a
      // worker keeps trying while the control plane is away or restarting
      // (which can surface as Unavailable, Internal for a refused HTTP/2
      // stream, DeadlineExceeded, ...).
      if (!(err instanceof ConnectError) || FINAL.has(err.code)) throw err;
      const ce = err;
      log.warn(`${what} failed; retrying`, { err: ce.message, code: Code[ce.code] });
      await sleep(jittered(backoff));
    }
  }
  return undefined;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().then(
    (code) => process.exit(code),
    (err) => {
      log.error("worker crashed", { err: String(err?.stack ?? err) });
      process.exit(1);
    },
  );
}
