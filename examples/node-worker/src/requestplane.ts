// The server half of Switchyard's http request plane (pkg/transport/http.go),
// on Node's own http and http2 modules.
//
// A call is POST {root}/{endpoint} with the request payload as the body. A
// request header k travels as the HTTP header "Dyn-Hdr-k", except
// traceparent, tracestate and x-request-id, which keep their own names. The
// answer is 200 with Content-Type application/x-switchyard-frames and a body
// of frames:
//
//   type    uint8             2 = data, 3 = end, 4 = error
//   length  uint32 big-endian
//   payload                   data: one response; end: empty;
//                             error: uint16 BE code length, code, message
//
// A refused call gets a non-200 status with one error frame as its body: 404
// no_handler, 413 too_large, 503 draining, 405 for a method other than POST.
// A stream that ends without an end or error frame is a broken stream (the
// frontend migrates such a request to another worker).
//
// Switchyard's Go client speaks HTTP/2 cleartext with prior knowledge (h2c)
// and falls back to HTTP/1.1, so both are served on one port: a connection
// that opens with the HTTP/2 preface goes to an http2 server, any other to an
// http server.
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";

export const CONTENT_TYPE = "application/x-switchyard-frames";
export const HEADER_PREFIX = "dyn-hdr-";
/** STANDARD_HEADERS keep their own names on the http plane, as pkg/transport.HeaderTraceParent, HeaderTraceState and HeaderRequestID. */
export const STANDARD_HEADERS = new Set(["traceparent", "tracestate", "x-request-id"]);

export const FRAME_DATA = 2;
export const FRAME_END = 3;
export const FRAME_ERROR = 4;

/** Error codes of pkg/transport (errors.go). */
export const Code = {
  unknown: "unknown",
  tooLarge: "too_large",
  draining: "draining",
  noHandler: "no_handler",
} as const;

/** HandlerError is a typed error a handler ends its call with. */
export class HandlerError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Cancelled is what send throws once the caller has gone away. */
export class Cancelled extends Error {
  constructor() {
    super("the caller went away");
  }
}

/** Call is one request as a handler sees it. */
export interface Call {
  endpoint: string;
  /** Request headers, lower-case keys, as pkg/transport.Headers. */
  headers: Record<string, string>;
  payload: Uint8Array;
  /** Aborted when the caller goes away (or the server closes). */
  signal: AbortSignal;
  /** send writes one data frame; it waits while the connection is full and throws Cancelled once the caller is gone. */
  send(payload: Uint8Array): Promise<void>;
}

/** Handler serves one call: it sends responses, then returns (end frame) or throws (error frame). */
export type Handler = (call: Call) => Promise<void>;

export function frame(type: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const b = Buffer.allocUnsafe(5 + payload.length);
  b[0] = type;
  b.writeUInt32BE(payload.length, 1);
  b.set(payload, 5);
  return b;
}

export function errorFrame(code: string, message: string): Buffer {
  const c = Buffer.from(code, "utf8");
  const m = Buffer.from(message, "utf8");
  const body = Buffer.allocUnsafe(2 + c.length + m.length);
  body.writeUInt16BE(c.length, 0);
  c.copy(body, 2);
  m.copy(body, 2 + c.length);
  return frame(FRAME_ERROR, body);
}

/** transportHeaders picks the request plane headers out of HTTP headers. */
export function transportHeaders(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, raw] of Object.entries(h)) {
    const v = Array.isArray(raw) ? raw[0] : raw;
    if (v === undefined || k.startsWith(":")) continue;
    const key = k.toLowerCase();
    if (STANDARD_HEADERS.has(key)) out[key] = v;
    else if (key.startsWith(HEADER_PREFIX) && key.length > HEADER_PREFIX.length) out[key.slice(HEADER_PREFIX.length)] = v;
  }
  return out;
}

export interface ServerOptions {
  host: string;
  port: number;
  /** rootPath is DYN_HTTP_RPC_ROOT_PATH, such as /v1/rpc. */
  rootPath: string;
  /** maxMessageSize bounds a request payload (DYN_TCP_MAX_MESSAGE_SIZE). */
  maxMessageSize: number;
  handlers: Map<string, Handler>;
  /** advertiseHost is the host in baseUrl; default host. */
  advertiseHost?: string;
  onError?: (msg: string, err: unknown) => void;
}

/** The writable half of one call, for either protocol. */
interface Exchange {
  status(code: number): void;
  write(b: Buffer): boolean;
  end(b?: Buffer): void;
  onDrain(f: () => void): void;
  gone(): boolean;
}

/** Server serves handlers on the http request plane. */
export class Server {
  private readonly h1: http.Server;
  private readonly h2: http2.Http2Server;
  private readonly tcp: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly calls = new Set<AbortController>();
  private draining = false;
  private idle: (() => void)[] = [];
  baseUrl = "";

  constructor(private readonly opts: ServerOptions) {
    this.h1 = http.createServer((req, res) => this.serveH1(req, res));
    // A large window, so that a big prompt uploads without waiting on
    // WINDOW_UPDATEs per 64 KiB (Node grants them as it reads, too).
    this.h2 = http2.createServer({ settings: { initialWindowSize: 1 << 20 } });
    this.h2.on("session", (s) => s.setLocalWindowSize(1 << 20));
    this.h2.on("stream", (stream, headers) => this.serveH2(stream, headers));
    this.tcp = net.createServer((socket) => this.accept(socket));
  }

  /** start listens and sets baseUrl, http://{advertise host}:{port}{root}. */
  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.tcp.once("error", reject);
      this.tcp.listen(this.opts.port, this.opts.host, () => resolve());
    });
    const addr = this.tcp.address() as net.AddressInfo;
    const host = this.opts.advertiseHost ?? this.opts.host;
    const h = host.includes(":") ? `[${host}]` : host;
    this.baseUrl = `http://${h}:${addr.port}${this.opts.rootPath}`;
  }

  get inflight(): number {
    return this.calls.size;
  }

  // accept reads a connection's first bytes to tell h2c's preface
  // ("PRI * HTTP/2.0") from an HTTP/1 request line, then hands the
  // connection, those bytes pushed back, to the server of its protocol.
  private accept(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on("close", () => this.sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length < 3) return;
      socket.off("data", onData);
      socket.pause();
      socket.unshift(head);
      const target: net.Server = head.toString("latin1", 0, 3) === "PRI" ? this.h2 : this.h1;
      target.emit("connection", socket);
      process.nextTick(() => socket.resume());
    };
    socket.on("data", onData);
  }

  private serveH1(req: http.IncomingMessage, res: http.ServerResponse): void {
    let finished = false;
    res.on("finish", () => (finished = true));
    const ex: Exchange = {
      status: (code) => res.writeHead(code, { "content-type": CONTENT_TYPE }),
      write: (b) => res.write(b),
      end: (b) => res.end(b),
      onDrain: (f) => res.once("drain", f),
      gone: () => res.destroyed || (res.writableEnded && !finished) || req.socket.destroyed,
    };
    const closed = new Promise<void>((resolve) => res.on("close", () => resolve()));
    this.serve(req.method ?? "", req.url ?? "", req.headers, req, ex, closed, () => finished);
  }

  private serveH2(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on("error", () => {});
    let finished = false;
    stream.on("finish", () => (finished = true));
    const ex: Exchange = {
      status: (code) => stream.respond({ ":status": code, "content-type": CONTENT_TYPE }),
      write: (b) => stream.write(b),
      end: (b) => stream.end(b),
      onDrain: (f) => stream.once("drain", f),
      gone: () => stream.destroyed || stream.closed,
    };
    const closed = new Promise<void>((resolve) => stream.on("close", () => resolve()));
    this.serve(String(headers[":method"] ?? ""), String(headers[":path"] ?? ""), headers, stream, ex, closed, () => finished);
  }

  private refuse(ex: Exchange, status: number, code: string, message: string): void {
    if (ex.gone()) return;
    ex.status(status);
    ex.end(errorFrame(code, message));
  }

  private async serve(
    method: string,
    path: string,
    headers: Record<string, string | string[] | undefined>,
    body: NodeJS.ReadableStream,
    ex: Exchange,
    closed: Promise<void>,
    finished: () => boolean,
  ): Promise<void> {
    const { rootPath, maxMessageSize, handlers } = this.opts;
    if (method !== "POST") {
      body.resume();
      return this.refuse(ex, 405, Code.unknown, `method ${method} not allowed; use POST`);
    }
    const p = path.split("?")[0];
    const endpoint = p.startsWith(rootPath + "/") ? p.slice(rootPath.length + 1) : "";
    if (endpoint === "" || endpoint.includes("/")) {
      body.resume();
      return this.refuse(ex, 404, Code.noHandler, `path "${p}" is not ${rootPath}/{endpoint}`);
    }
    const declared = Number(headers["content-length"] ?? -1);
    if (declared > maxMessageSize) {
      body.resume();
      return this.refuse(ex, 413, Code.tooLarge, `transport: request payload of ${declared} bytes exceeds the limit of ${maxMessageSize} bytes`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const c of body as AsyncIterable<Buffer>) {
        size += c.length;
        if (size > maxMessageSize) break;
        chunks.push(c);
      }
    } catch {
      return; // the caller went away
    }
    if (size > maxMessageSize) {
      return this.refuse(ex, 413, Code.tooLarge, `transport: request payload of more than ${maxMessageSize} bytes exceeds the limit of ${maxMessageSize} bytes`);
    }
    const handler = handlers.get(endpoint);
    if (!handler) {
      return this.refuse(ex, 404, Code.noHandler, `transport: no handler for endpoint "${endpoint}"`);
    }
    if (this.draining) {
      return this.refuse(ex, 503, Code.draining, "server is draining; retry on another instance");
    }
    const ac = new AbortController();
    this.calls.add(ac);
    // A stream that closes before the handler has finished its answer means
    // the caller went away (HTTP/2 RST_STREAM, or the HTTP/1 connection).
    void closed.then(() => {
      if (!finished()) ac.abort(new Cancelled());
    });
    ex.status(200);
    const send = async (payload: Uint8Array): Promise<void> => {
      if (ac.signal.aborted || ex.gone()) throw new Cancelled();
      if (!ex.write(frame(FRAME_DATA, payload))) {
        await new Promise<void>((resolve) => {
          ex.onDrain(resolve);
          ac.signal.addEventListener("abort", () => resolve(), { once: true });
        });
        if (ac.signal.aborted) throw new Cancelled();
      }
    };
    try {
      await handler({ endpoint, headers: transportHeaders(headers), payload: Buffer.concat(chunks), signal: ac.signal, send });
      if (!ex.gone()) ex.end(frame(FRAME_END));
    } catch (err) {
      if (!ex.gone() && !(err instanceof Cancelled)) {
        const he = err instanceof HandlerError ? err : new HandlerError(Code.unknown, String((err as Error)?.message ?? err));
        if (!(err instanceof HandlerError)) this.opts.onError?.("handler failed", err);
        ex.end(errorFrame(he.code, he.message));
      }
    } finally {
      // The call counts until its stream has closed, so that a drain does
      // not cut the last frames of an answer still on their way out.
      await closed;
      this.calls.delete(ac);
      if (this.calls.size === 0) for (const f of this.idle.splice(0)) f();
    }
  }

  /**
   * drain refuses new calls (503 draining) and waits up to timeoutMs for
   * the calls in flight to end; it says whether they all did.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.draining = true;
    if (this.calls.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      new Promise<boolean>((resolve) => this.idle.push(() => resolve(true))),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    return ok;
  }

  /** close cancels what still runs and closes every connection. */
  async close(): Promise<void> {
    this.draining = true;
    for (const ac of this.calls) ac.abort(new Cancelled());
    const closed = new Promise<void>((resolve) => this.tcp.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    this.h1.closeAllConnections();
    await closed;
  }
}
