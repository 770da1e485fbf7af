// A registry lease kept alive on a KeepAlive bidi stream, as the Go SDK's
// pkg/registryclient.Session does: a refresh at half the TTL the registry
// granted; after a failure, retries with jittered exponential backoff (50 ms
// to 5 s), past the lease's deadline too. The lease is truly lost only when
// the registry answers found=false (revoked, or expired while no refresh
// reached it): etcd has dropped it then, with everything on it.
import { type Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import {
  KeepAliveRequestSchema,
  type KeepAliveRequest,
  type KeepAliveResponse,
  RegistryService,
} from "../../../gen/ts/switchyard/registry/v1/registry_pb.js";
import { log } from "./log.js";

/** LEASE_TOKEN_KEY is the gRPC metadata key of a lease's secret token, as pkg/authtoken.LeaseTokenKey. */
export const LEASE_TOKEN_KEY = "switchyard-lease-token";
export const MIN_BACKOFF_MS = 50;
export const MAX_BACKOFF_MS = 5000;

/** jittered returns a delay drawn uniformly from [d/2, d], so that many workers that failed together do not retry together. */
export function jittered(d: number): number {
  return d / 2 + Math.random() * (d / 2);
}

/** Queue is an async iterable fed by push: the request side of a bidi stream. */
class Queue<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiting: ((r: IteratorResult<T>) => void) | undefined;
  private ended = false;

  push(v: T): void {
    if (this.waiting) {
      const w = this.waiting;
      this.waiting = undefined;
      w({ value: v, done: false });
    } else this.items.push(v);
  }

  end(): void {
    this.ended = true;
    this.waiting?.({ value: undefined, done: true });
    this.waiting = undefined;
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        const v = this.items.shift();
        if (v !== undefined) return Promise.resolve({ value: v, done: false });
        if (this.ended) return Promise.resolve({ value: undefined, done: true });
        return new Promise((resolve) => (this.waiting = resolve));
      },
      return: () => {
        this.end();
        return Promise.resolve({ value: undefined, done: true });
      },
      throw: () => {
        this.end();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}

/** Stream is one open KeepAlive stream. */
class Stream {
  private readonly requests = new Queue<KeepAliveRequest>();
  private readonly responses: AsyncIterator<KeepAliveResponse>;
  private readonly ac = new AbortController();

  constructor(client: Client<typeof RegistryService>, headers: Record<string, string>) {
    this.responses = client.keepAlive(this.requests, { signal: this.ac.signal, headers })[Symbol.asyncIterator]();
  }

  /** refresh sends one keep-alive and waits at most timeoutMs for its answer. */
  async refresh(leaseId: bigint, timeoutMs: number): Promise<KeepAliveResponse> {
    this.requests.push(create(KeepAliveRequestSchema, { leaseId }));
    let timer: NodeJS.Timeout | undefined;
    try {
      for (;;) {
        const r = await Promise.race([
          this.responses.next(),
          new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("keep-alive answer timed out")), timeoutMs))),
        ]);
        clearTimeout(timer);
        if (r.done) throw new Error("keep-alive stream ended");
        if (r.value.leaseId === leaseId) return r.value;
      }
    } finally {
      clearTimeout(timer);
    }
  }

  close(): void {
    this.requests.end();
    this.ac.abort();
  }
}

/** Lease keeps one granted lease alive until close, or until it is lost. */
export class Lease {
  /** lost resolves with the reason once the lease is gone. */
  readonly lost: Promise<string>;
  /** gone is true once lost has resolved. */
  gone = false;
  private resolveLost!: (reason: string) => void;
  private stopped = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void>;
  /** headers carry the lease token; pass them on Register, RegisterModel and Deregister. */
  readonly headers: Record<string, string>;

  constructor(
    private readonly client: Client<typeof RegistryService>,
    readonly id: bigint,
    readonly ttlSeconds: number,
    token: string,
  ) {
    // Every call on the lease proves ownership with its secret token, in
    // the metadata key pkg/authtoken.LeaseTokenKey names.
    this.headers = { [LEASE_TOKEN_KEY]: token };
    this.lost = new Promise((resolve) => (this.resolveLost = resolve));
    this.loop = this.keepAlive();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, Math.max(ms, 0));
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async keepAlive(): Promise<void> {
    const ttlMs = this.ttlSeconds * 1000;
    let deadline = Date.now() + ttlMs;
    let next = Date.now() + ttlMs / 2;
    let backoff = MIN_BACKOFF_MS;
    let stream: Stream | undefined;
    let pastDeadline = false;
    try {
      for (;;) {
        await this.sleep(next - Date.now());
        if (this.stopped) return;
        stream ??= new Stream(this.client, this.headers);
        let r: KeepAliveResponse;
        try {
          r = await stream.refresh(this.id, Math.max(Math.min(deadline - Date.now(), 5000), 1000));
        } catch (err) {
          stream.close();
          stream = undefined;
          if (this.stopped) return;
          const now = Date.now();
          // Past the deadline etcd has most likely dropped the lease, but
          // only the registry can say so: keep asking (the worker keeps
          // serving meanwhile), and register again once it answers found=false.
          const wait = now < deadline ? Math.min(jittered(backoff), deadline - now) : jittered(backoff);
          if (now >= deadline && !pastDeadline) log.error("lease deadline passed without reaching the registry; still trying", { lease: this.id.toString(16), err: (err as Error).message });
          pastDeadline ||= now >= deadline;
          log.warn("lease keep-alive failed; retrying", { err: (err as Error).message, backoff_ms: Math.round(wait), deadline_in_ms: deadline - now });
          next = now + wait;
          backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
          continue;
        }
        if (!r.found) return this.lose(`the registry no longer has lease ${this.id.toString(16)}`);
        const now = Date.now();
        const ttl = Number(r.ttlSeconds) * 1000;
        deadline = now + ttl;
        next = now + ttl / 2;
        backoff = MIN_BACKOFF_MS;
        pastDeadline = false;
      }
    } finally {
      stream?.close();
    }
  }

  private lose(reason: string): void {
    log.error("lease lost", { lease: this.id.toString(16), reason });
    this.gone = true;
    this.resolveLost(reason);
  }

  /** close stops the keep-alive (it does not revoke the lease: Deregister does). */
  async close(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.loop;
  }
}
