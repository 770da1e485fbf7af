// A stand-in engine: it "prefills" each prompt into an LRU prefix cache of
// KV blocks, reporting new blocks as stored and evicted ones as removed (KV
// events), and generates tokens that echo the prompt, one per response.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import {
  FinishReason,
  GenerateRequestSchema,
  type GenerateRequest,
  GenerateResponseSchema,
  type KvBlock,
  KvBlockSchema,
  type KvCacheEvent,
  KvCacheEventSchema,
  type KvEventBatch,
  KvEventBatchSchema,
  type LoadMetrics,
  LoadMetricsSchema,
  UsageSchema,
} from "../../../gen/ts/switchyard/worker/v1/worker_pb.js";
import { type Hasher } from "./kvhash.js";
import { log } from "./log.js";
import { Cancelled, type Call, HandlerError } from "./requestplane.js";

export interface EngineOptions {
  blockSize: number;
  contextLength: number;
  kvBlocks: number;
  tokenDelayMs: number;
}

export class EchoEngine {
  /** cache holds sequence hashes, least recently used first (a Map keeps insertion order). */
  private readonly cache = new Map<bigint, true>();
  private readonly running = new Map<object, number>();
  private nextEventId = 1n;
  private instanceId = 0n;

  constructor(
    private readonly opts: EngineOptions,
    private readonly hasher: Hasher,
    private readonly publish: (b: KvEventBatch) => void,
  ) {}

  /** adopt makes the engine's KV events and load name instanceId (its first registration). */
  adopt(instanceId: bigint): void {
    this.instanceId = instanceId;
  }

  /**
   * reset starts over as a new instance (after a re-registration): the
   * router dropped every block of the old one, so the cache starts empty and
   * event ids start at 1 again.
   */
  reset(instanceId: bigint): void {
    this.instanceId = instanceId;
    this.cache.clear();
    // As pkg/worker does: the new instance's first event says its cache is
    // empty, before any other event of it.
    this.publish(create(KvEventBatchSchema, { instanceId, dpRank: 0, firstEventId: 1n, events: [create(KvCacheEventSchema, { event: { case: "cleared", value: {} } })] }));
    this.nextEventId = 2n;
  }

  load(): LoadMetrics {
    let decodeBlocks = 0;
    for (const n of this.running.values()) decodeBlocks += Math.ceil(n / this.opts.blockSize);
    return create(LoadMetricsSchema, {
      instanceId: this.instanceId,
      dpRank: 0,
      activeDecodeBlocks: BigInt(decodeBlocks),
      kvBlocksUsed: BigInt(this.cache.size),
      kvBlocksTotal: BigInt(this.opts.kvBlocks),
      runningRequests: this.running.size,
      timestamp: timestampNow(),
    });
  }

  /** prefill caches the prompt's full blocks and returns how many prompt tokens were cached already. */
  prefill(prompt: number[]): number {
    const blocks = this.hasher.hashes(prompt, this.opts.blockSize);
    let cached = 0;
    while (cached < blocks.length && this.cache.has(blocks[cached].sequence)) cached++;
    const events: KvCacheEvent[] = [];
    let run: KvBlock[] = [];
    let parent: bigint | undefined;
    const flush = () => {
      if (run.length === 0) return;
      events.push(create(KvCacheEventSchema, { event: { case: "stored", value: { parentSequenceHash: parent, blocks: run } } }));
      run = [];
    };
    blocks.forEach((b, i) => {
      if (this.cache.has(b.sequence)) {
        this.cache.delete(b.sequence); // move to the most recent end
        this.cache.set(b.sequence, true);
        flush();
        return;
      }
      this.cache.set(b.sequence, true);
      if (run.length === 0) parent = i > 0 ? blocks[i - 1].sequence : undefined;
      run.push(create(KvBlockSchema, { sequenceHash: b.sequence, localHash: b.local }));
    });
    flush();
    const evicted: bigint[] = [];
    while (this.cache.size > this.opts.kvBlocks) {
      const oldest = this.cache.keys().next().value as bigint;
      this.cache.delete(oldest);
      evicted.push(oldest);
    }
    if (evicted.length > 0) events.push(create(KvCacheEventSchema, { event: { case: "removed", value: { sequenceHashes: evicted } } }));
    if (events.length > 0) {
      this.publish(create(KvEventBatchSchema, { instanceId: this.instanceId, dpRank: 0, firstEventId: this.nextEventId, events }));
      this.nextEventId += BigInt(events.length);
    }
    return cached * this.opts.blockSize;
  }

  /** generate is the request plane handler of the generate endpoint. */
  generate = async (call: Call): Promise<void> => {
    let req: GenerateRequest;
    try {
      req = fromBinary(GenerateRequestSchema, call.payload);
    } catch (err) {
      throw new HandlerError("invalid_argument", `worker: invalid generate request: ${(err as Error).message}`);
    }
    const prompt = req.tokenIds;
    if (prompt.length === 0) throw new HandlerError("invalid_argument", "worker: invalid generate request: empty prompt");
    // The echo engine computes no probabilities and cannot constrain its
    // output: a request that asks for either is refused (the frontend
    // answers the client's 400 with this reason), never answered as if it
    // had been honoured.
    if (req.guidedDecoding !== undefined) {
      throw new HandlerError("unimplemented", "worker: this echo engine does no guided decoding (structured outputs)");
    }
    if (req.logprobs !== undefined || req.promptLogprobs !== undefined) {
      throw new HandlerError("unimplemented", "worker: this echo engine computes no log probabilities");
    }
    const room = this.opts.contextLength - prompt.length;
    if (room <= 0) {
      throw new HandlerError("invalid_argument", `worker: prompt of ${prompt.length} tokens leaves no room in a context of ${this.opts.contextLength}`);
    }
    const requestId = req.requestId || call.headers["x-request-id"] || "";
    const maxTokens = Math.min(req.maxTokens || room, room);
    const stops = new Set(req.stop?.stopTokenIds ?? []);
    const minTokens = req.stop?.minTokens ?? 0;
    const cached = this.prefill(prompt);
    const key = {};
    let i = 0;
    try {
      for (; i < maxTokens; i++) {
        this.running.set(key, prompt.length + i);
        await delay(this.opts.tokenDelayMs, call.signal);
        const token = prompt[i % prompt.length];
        const resp = create(GenerateResponseSchema, { tokenIds: [token] });
        if (stops.has(token) && i + 1 >= minTokens) resp.finishReason = FinishReason.STOP;
        else if (i + 1 === maxTokens) resp.finishReason = FinishReason.LENGTH;
        if (resp.finishReason !== FinishReason.UNSPECIFIED) {
          resp.usage = create(UsageSchema, { promptTokens: prompt.length, completionTokens: i + 1, cachedPromptTokens: cached });
        }
        await call.send(toBinary(GenerateResponseSchema, resp));
        if (resp.finishReason !== FinishReason.UNSPECIFIED) {
          log.info("generate done", { request_id: requestId, instance: this.instanceId.toString(16), tokens: i + 1, cached_tokens: cached });
          return;
        }
      }
    } catch (err) {
      if (err instanceof Cancelled) log.info("generate cancelled", { request_id: requestId, tokens: i });
      throw err;
    } finally {
      this.running.delete(key);
    }
  };
}

/** delay waits ms (0: a turn of the event loop), or throws Cancelled once signal aborts. */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Cancelled());
    const onAbort = () => {
      clearTimeout(t);
      reject(new Cancelled());
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
