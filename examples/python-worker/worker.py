#!/usr/bin/python3
"""An example Switchyard worker in Python, built on the generated stubs only.

It serves `generate` on the HTTP request plane (deterministic tokens that echo
the prompt), registers with the registry on a lease it keeps alive, publishes
a model card, and publishes KV cache events for the prompt blocks it "caches".
SIGTERM or SIGINT deregisters at once, lets in-flight requests finish within
--drain-timeout and exits 0. An unreachable registry never stops it: started
before the registry (or its etcd, or the eventbus) it serves and retries until
they answer; the keep-alive retries with jittered backoff, and when the
registry says the lease is gone it registers again on a new lease (a new
instance id), as pkg/worker does.

Run it with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf,
python3-xxhash, python3-h2); see README.md.
"""

import argparse
import collections
import concurrent.futures
import faulthandler
import json
import logging
import os
import pathlib
import queue
import random
import signal
import socket
import sys
import threading
import time
import uuid

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "gen" / "python"))

import grpc  # noqa: E402
from google.protobuf.message import DecodeError  # noqa: E402

from switchyard.common.v1 import common_pb2  # noqa: E402
from switchyard.eventbus.v1 import eventbus_pb2, eventbus_pb2_grpc  # noqa: E402
from switchyard.registry.v1 import registry_pb2, registry_pb2_grpc  # noqa: E402
from switchyard.worker.v1 import worker_pb2, worker_pb2_grpc  # noqa: E402

import kvhash  # noqa: E402
import kvlocal  # noqa: E402
import requestplane  # noqa: E402

log = logging.getLogger("pyworker")

KV_EVENTS_NAME = "kv_cache_update"  # as pkg/wire.KVEventsName
LOAD_NAME = "load_metrics"  # as pkg/wire.LoadName
TOKENIZER_BUCKET = "tokenizers"  # as pkg/wire.TokenizerBucket
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.json.gz", "tokenizer_config.json")  # as pkg/worker.TokenizerFiles
TYPE_HEADER = "Switchyard-Type"  # as pkg/wire.HeaderType: the payload's full proto name
ENV_PREFIX = "SWITCHYARD_PYWORKER_"


def subject(namespace, component, name):
    """An event subject, {namespace}.{component}.{name}, as pkg/wire.Subject."""
    return "%s.%s.%s" % (namespace, component, name)


def kv_events_msg_id(instance_id, dp_rank, first_event_id):
    """A KV event batch's msg id, kv-{instance hex}-{dp rank}-{first event id},
    as pkg/wire.KVEventsMsgID: a batch published again is stored once."""
    return "kv-%x-%d-%d" % (instance_id, dp_rank, first_event_id)


# Flags whose variables keep the names Switchyard's Go side uses.
NAMED_ENV = {
    "http_host": "DYN_HTTP_RPC_HOST",
    "http_port": "DYN_HTTP_RPC_PORT",
    "http_root_path": "DYN_HTTP_RPC_ROOT_PATH",
    "max_message_size": "DYN_TCP_MAX_MESSAGE_SIZE",
    "auth_token": "SWITCHYARD_AUTH_TOKEN",
}
# The registered role of each --disaggregation-mode (pkg/wire's role names).
ROLES = {"agg": common_pb2.ROLE_AGG, "prefill": common_pb2.ROLE_PREFILL, "decode": common_pb2.ROLE_DECODE}

# The gRPC metadata key of a lease's secret token (pkg/authtoken.LeaseTokenKey).
LEASE_TOKEN_KEY = "switchyard-lease-token"
TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED)


class JSONFormatter(logging.Formatter):
    """One JSON object per line, like the Go services' slog JSON handler."""

    def format(self, record):
        out = {"time": self.formatTime(record), "level": record.levelname, "msg": record.getMessage()}
        out.update(getattr(record, "attrs", {}))
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out)


def info(msg, **attrs):
    log.info(msg, extra={"attrs": attrs})


def error(msg, **attrs):
    log.error(msg, extra={"attrs": attrs})


def parse_config(argv):
    p = argparse.ArgumentParser(
        description="Example Switchyard worker on the generated Python stubs. Every flag can also be set "
                    "through %s<FLAG> (upper snake case) or the DYN_* variable named in its help." % ENV_PREFIX)
    p.add_argument("--namespace", default="dynamo", help="registry namespace")
    p.add_argument("--component", default="backend", help="registry component")
    p.add_argument("--endpoint", default="generate", help="registry endpoint")
    p.add_argument("--model-name", default="switchyard/python-echo", help="model name on the model card")
    p.add_argument("--tokenizer-dir", default="",
                   help="directory with tokenizer.json (or tokenizer.json.gz) and tokenizer_config.json, uploaded to "
                        "the object store and referenced from the model card so the frontend can tokenize for this "
                        "model; empty: no tokenizer (the frontend then serves only pre-tokenized requests)")
    p.add_argument("--disaggregation-mode", default="agg", choices=sorted(ROLES),
                   help="the role registered (common.v1.Role); this example serves whole requests, whatever its role")
    p.add_argument("--block-size", type=int, default=16, help="KV block size in tokens")
    p.add_argument("--context-length", type=int, default=40960, help="context length on the model card")
    p.add_argument("--kv-blocks", type=int, default=8192, help="KV blocks the simulated cache holds before evicting")
    p.add_argument("--token-delay", type=float, default=0.005, help="seconds between generated tokens")
    p.add_argument("--load-interval", type=float, default=1.0, help="seconds between load metrics publications")
    p.add_argument("--registry-addr", default="localhost:7001", help="registry address, host:port")
    p.add_argument("--eventbus-addr", default="localhost:7002", help="eventbus address, host:port")
    p.add_argument("--auth-token", default="", help="bearer token sent to the registry and eventbus (SWITCHYARD_AUTH_TOKEN)")
    p.add_argument("--lease-ttl", type=int, default=10, help="registry lease TTL in seconds (1..300)")
    p.add_argument("--drain-timeout", type=float, default=30, help="seconds in-flight requests may take at shutdown")
    p.add_argument("--http-host", default="", help="address to bind and advertise (DYN_HTTP_RPC_HOST; "
                                                   "default: a non-loopback IPv4 of the machine, else 127.0.0.1)")
    p.add_argument("--http-port", type=int, default=8888, help="port (DYN_HTTP_RPC_PORT; 0 picks one)")
    p.add_argument("--http-root-path", default="/v1/rpc", help="path prefix of endpoints (DYN_HTTP_RPC_ROOT_PATH)")
    p.add_argument("--kv-events-mode", default="jetstream", choices=["jetstream", "core", "direct", "none"],
                   help="where KV events go: jetstream (the eventbus stream), core (NATS Core subjects through the "
                        "eventbus), direct (nowhere: routers watch this worker's WorkerService), none")
    p.add_argument("--kv-events-ring", type=int, default=100000,
                   help="recent KV events kept for routers to fill gaps from")
    p.add_argument("--worker-api-addr", default="",
                   help="WorkerService gRPC listen address (default: --http-host, a free port)")
    p.add_argument("--max-message-size", type=int, default=32 << 20,
                   help="largest request payload in bytes (DYN_TCP_MAX_MESSAGE_SIZE)")
    given = {a.split("=", 1)[0][2:].replace("-", "_") for a in argv if a.startswith("--")}
    for action in p._actions:
        dest = action.dest
        if dest == "help" or dest in given:
            continue
        env = NAMED_ENV.get(dest, ENV_PREFIX + dest.upper())
        if env in os.environ:
            raw = os.environ[env]
            try:
                p.set_defaults(**{dest: action.type(raw) if action.type else raw})
            except ValueError:
                p.error("%s=%r is not a valid value for --%s" % (env, raw, dest.replace("_", "-")))
    cfg = p.parse_args(argv)
    plane = os.environ.get("DYN_REQUEST_PLANE", "http").strip().lower()
    if plane != "http":
        p.error("DYN_REQUEST_PLANE=%r: this worker serves the http request plane only (valid: http)"
                % os.environ["DYN_REQUEST_PLANE"])
    if cfg.block_size <= 0:
        p.error("--block-size must be positive, got %d" % cfg.block_size)
    if cfg.load_interval <= 0:
        p.error("--load-interval must be positive, got %g" % cfg.load_interval)
    if not 1 <= cfg.lease_ttl <= 300:
        p.error("--lease-ttl must be 1..300 seconds, got %d" % cfg.lease_ttl)
    if not cfg.http_host:
        cfg.http_host = detect_host()
    return cfg


def tokenizer_files(directory):
    """The tokenizer files directory holds, as pkg/worker.TokenizerFiles:
    tokenizer.json or tokenizer.json.gz, and tokenizer_config.json."""
    out = [os.path.join(directory, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(directory, n))]
    if not out or os.path.basename(out[0]) == "tokenizer_config.json":
        raise ValueError("tokenizer directory %s has no tokenizer.json" % directory)
    return out


def tokenizer_object(model, name):
    """The object name of a tokenizer file, as pkg/wire.TokenizerObject:
    "Qwen/Qwen3-0.6B" and "tokenizer.json" give "Qwen--Qwen3-0.6B/tokenizer.json"."""
    return model.replace("/", "--").replace(" ", "_") + "/" + name


def upload_tokenizer(eventbus, model, paths, chunk=256 << 10):
    """Uploads each file to the tokenizers bucket with PutObject (a header,
    then chunks) and returns the TokenizerArtifacts the model card lists,
    as pkg/worker does."""
    out = []
    for path in paths:
        name = os.path.basename(path)
        obj = tokenizer_object(model, name)
        with open(path, "rb") as f:
            data = f.read()

        def parts():
            yield eventbus_pb2.PutObjectRequest(header=eventbus_pb2.PutObjectHeader(bucket=TOKENIZER_BUCKET, name=obj))
            for i in range(0, len(data), chunk):
                yield eventbus_pb2.PutObjectRequest(chunk=data[i:i + chunk])

        resp = eventbus.PutObject(parts(), timeout=30)
        out.append(registry_pb2.TokenizerArtifact(name=name, sha256=resp.info.sha256, size=resp.info.size,
                                                  object_key=TOKENIZER_BUCKET + "/" + obj))
        info("tokenizer file uploaded", object=TOKENIZER_BUCKET + "/" + obj, size=resp.info.size,
             sha256=resp.info.sha256)
    return out


def detect_host():
    """A non-loopback IPv4 address of this machine, or 127.0.0.1."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent; this only picks the outgoing interface
        addr = s.getsockname()[0]
        return addr if not addr.startswith("127.") else "127.0.0.1"
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


LEASE_NOT_FOUND = "LEASE_NOT_FOUND"  # as pkg/apierr.ReasonLeaseNotFound
MIN_BACKOFF, MAX_BACKOFF = 0.05, 5.0  # as pkg/registryclient's session


def full_jitter(attempt, base=MIN_BACKOFF, cap=MAX_BACKOFF):
    """The wait before retry number attempt (0 first): uniform in
    [0, min(cap, base * 2**attempt)], so that many workers that lost the same
    registry do not come back in step."""
    return random.uniform(0, min(cap, base * (2 ** min(attempt, 30))))


def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _fields(b):
    """(field number, value) of a protobuf message's varint and
    length-delimited fields; others are skipped."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, typ = key >> 3, key & 7
        if typ == 0:
            v, i = _varint(b, i)
        elif typ == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise IndexError("truncated field")
            v, i = b[i:i + n], i + n
        elif typ == 1:
            v, i = None, i + 8
        elif typ == 5:
            v, i = None, i + 4
        else:
            return
        yield num, v


def error_reason(err):
    """The ErrorInfo reason of a gRPC error (from its google.rpc.Status in
    grpc-status-details-bin, decoded by hand: Debian has no grpcio-status),
    or "" when it has none."""
    try:
        md = err.trailing_metadata() or ()
    except Exception:  # not a call error
        return ""
    for k, v in md:
        if k != "grpc-status-details-bin":
            continue
        try:
            for num, anyv in _fields(v):
                if num != 3:  # Status.details
                    continue
                f = dict(_fields(anyv))
                if bytes(f.get(1, b"")).endswith(b"google.rpc.ErrorInfo"):
                    reason = dict(_fields(f.get(2, b""))).get(1, b"")
                    return bytes(reason).decode("utf-8", "replace")
        except (IndexError, TypeError):
            return ""
    return ""


def lease_gone(err):
    """Whether err says the registry no longer has the lease."""
    code = getattr(err, "code", None)
    return (isinstance(err, grpc.RpcError) and callable(code) and code() == grpc.StatusCode.NOT_FOUND
            and error_reason(err) == LEASE_NOT_FOUND)


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds "authorization: Bearer <token>" to every call, as Go's
    authtoken.Bearer does. grpc's call credentials need a secure channel;
    an interceptor also works on a plaintext loopback one."""

    def __init__(self, token):
        self.header = ("authorization", "Bearer " + token)

    def _details(self, d):
        md = list(d.metadata or ()) + [self.header]
        return d._replace(metadata=md) if hasattr(d, "_replace") else _CallDetails(d, md)

    def intercept_unary_unary(self, cont, d, req):
        return cont(self._details(d), req)

    def intercept_unary_stream(self, cont, d, req):
        return cont(self._details(d), req)

    def intercept_stream_unary(self, cont, d, it):
        return cont(self._details(d), it)

    def intercept_stream_stream(self, cont, d, it):
        return cont(self._details(d), it)


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                             "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    def __new__(cls, d, md):
        return super().__new__(cls, d.method, d.timeout, md, d.credentials,
                               getattr(d, "wait_for_ready", None), getattr(d, "compression", None))


def with_bearer(channel, token):
    """The channel, sending token on every call when there is one."""
    return grpc.intercept_channel(channel, _Bearer(token)) if token else channel


class _KeepAliveStream:
    """One KeepAlive bidi stream and the thread that reads its answers."""

    def __init__(self, stub, metadata):
        self.requests = queue.Queue()
        self.answers = queue.Queue()
        self.responses = stub.KeepAlive(iter(self.requests.get, None), metadata=metadata)
        self.reader = threading.Thread(target=self._read, name="keepalive-read", daemon=True)
        self.reader.start()

    def _read(self):
        try:
            for r in self.responses:
                self.answers.put(r)
            self.answers.put(grpc.RpcError("keep-alive stream ended"))
        except grpc.RpcError as e:
            self.answers.put(e)

    def refresh(self, lease_id, timeout):
        """Refreshes the lease; returns (ttl seconds, found) or raises."""
        self.requests.put(registry_pb2.KeepAliveRequest(lease_id=lease_id))
        end = time.monotonic() + max(timeout, 0.05)
        while True:
            try:
                r = self.answers.get(timeout=max(end - time.monotonic(), 0))
            except queue.Empty:
                raise TimeoutError("keep-alive answer timed out") from None
            if isinstance(r, Exception):
                raise r
            if r.lease_id == lease_id:
                return r.ttl_seconds, r.found

    def close(self):
        self.requests.put(None)
        self.responses.cancel()
        self.reader.join()


class Lease:
    """A registry lease kept alive at half its TTL, as pkg/registryclient.Session does."""

    def __init__(self, stub, ttl):
        self.stub = stub
        resp = stub.GrantLease(registry_pb2.GrantLeaseRequest(ttl_seconds=ttl), timeout=10)
        self.id = resp.lease_id
        self.ttl = resp.ttl_seconds
        # Every call on the lease proves ownership with its secret token.
        self.metadata = ((LEASE_TOKEN_KEY, resp.lease_token),)
        self.lost = None  # the reason, once lost
        self._stop = threading.Event()
        self.done = threading.Event()  # set when lost or closed
        self._thread = threading.Thread(target=self._keep_alive, name="keepalive", daemon=True)
        self._thread.start()

    def _keep_alive(self):
        """Runs until closed or the registry says the lease is gone. An
        unreachable registry is never a reason to give up (the lease may
        outlive the outage, and only the registry can tell), so failures are
        retried with full-jitter backoff for as long as the worker runs."""
        deadline = time.monotonic() + self.ttl
        nxt = time.monotonic() + self.ttl / 2
        failures = 0
        expired = False
        stream = None
        try:
            while not self._stop.wait(max(nxt - time.monotonic(), 0)):
                if stream is None:
                    stream = _KeepAliveStream(self.stub, self.metadata)
                left = deadline - time.monotonic()
                try:
                    ttl, found = stream.refresh(self.id, min(max(left, 1), 5))
                except (grpc.RpcError, TimeoutError) as e:
                    stream.close()
                    stream = None
                    if lease_gone(e):
                        self._lose("the registry no longer has lease %x" % self.id)
                        return
                    now = time.monotonic()
                    wait = full_jitter(failures)
                    failures += 1
                    left = deadline - now
                    if left > 0:
                        wait = min(wait, left)
                        log.warning("lease keep-alive failed; retrying", extra={"attrs": {
                            "err": str(e), "backoff": round(wait, 3), "deadline_in": round(left, 3)}})
                    elif not expired:
                        expired = True
                        error("lease deadline passed without reaching the registry; still trying "
                              "(the lease may outlive the outage)", lease="%x" % self.id, err=str(e))
                    nxt = now + wait
                    continue
                if not found:
                    self._lose("the registry no longer has lease %x" % self.id)
                    return
                if failures:
                    info("lease keep-alive recovered", lease="%x" % self.id)
                now = time.monotonic()
                deadline, nxt, failures, expired = now + ttl, now + ttl / 2, 0, False
        finally:
            if stream is not None:
                stream.close()

    def _lose(self, reason):
        error("lease lost", lease="%x" % self.id, reason=reason)
        self.lost = reason
        self.done.set()

    def close(self):
        """Stops the keep-alive and revokes the lease, deleting what is registered on it."""
        self._stop.set()
        self._thread.join()
        if self.lost is None:
            try:
                self.stub.Deregister(registry_pb2.DeregisterRequest(lease_id=self.id), timeout=10,
                                    metadata=self.metadata)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise
        self.done.set()


class KvPublisher:
    """Publishes KvEventBatch messages in order, one eventbus Publish each, on
    {namespace}.{component}.kv_cache_update with the msg id
    kv-{instance hex}-{dp rank}-{first event id} (as pkg/worker does), so a
    retried publish is stored once, and the Switchyard-Type header."""

    def __init__(self, stub, subject, core=False):
        self.stub = stub
        self.subject = subject
        self.core = core
        self.queue = queue.Queue()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-publish", daemon=True)
        self._thread.start()

    def publish(self, batch):
        self.queue.put(batch)

    def _run(self):
        while True:
            batch = self.queue.get()
            if batch is None:
                return
            msg_id = kv_events_msg_id(batch.instance_id, batch.dp_rank, batch.first_event_id)
            event = eventbus_pb2.Event(subject=self.subject, payload=batch.SerializeToString(), msg_id=msg_id,
                                       headers={TYPE_HEADER: batch.DESCRIPTOR.full_name})
            backoff = 0.05
            attempt = 0
            while True:
                try:
                    self.stub.Publish(eventbus_pb2.PublishRequest(event=event, core=self.core), timeout=10)
                    break
                except grpc.RpcError as e:
                    if e.code() not in TRANSIENT or self._closing.is_set():
                        error("KV events not published", events=len(batch.events), err=str(e.details()))
                        break
                    attempt += 1
                    if attempt == 1 or attempt % 10 == 0:
                        # Retried for as long as it takes, but not silently:
                        # a worker whose events never reach the stream says so.
                        log.warning("KV events publish failed; retrying", extra={"attrs": {
                            "events": len(batch.events), "first_event_id": batch.first_event_id,
                            "attempt": attempt, "code": e.code().name, "err": str(e.details())}})
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 2)

    def close(self, timeout):
        """Publishes what is queued, retrying for at most timeout seconds."""
        self.queue.put(None)
        self._thread.join(timeout)
        self._closing.set()
        self._thread.join()


class KvSink:
    """Applies each batch to the local indexer, then publishes it in the
    jetstream and core modes (direct and none publish nothing)."""

    def __init__(self, index, publisher):
        self.index = index
        self.publisher = publisher

    def publish(self, batch):
        self.index.apply(batch)
        if self.publisher is not None:
            self.publisher.publish(batch)


class LoadPublisher:
    """Publishes the engine's LoadMetrics every interval on
    {namespace}.{component}.load_metrics, as pkg/worker does."""

    def __init__(self, stub, subject, engine, interval):
        self.stub = stub
        self.subject = subject
        self.engine = engine
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-publish", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.interval):
            load = self.engine.load()
            event = eventbus_pb2.Event(subject=self.subject, payload=load.SerializeToString(),
                                       msg_id=uuid.uuid4().hex, headers={TYPE_HEADER: load.DESCRIPTOR.full_name})
            try:
                self.stub.Publish(eventbus_pb2.PublishRequest(event=event), timeout=2)
            except grpc.RpcError as e:
                log.warning("load not published", extra={"attrs": {"err": str(e.details())}})

    def close(self):
        self._stop.set()
        self._thread.join()


class EchoEngine:
    """A stand-in engine: it "prefills" the prompt into a prefix cache of
    --kv-blocks blocks (LRU), reporting stored and evicted blocks as KV
    events, and generates tokens that echo the prompt."""

    def __init__(self, cfg, instance_id, publisher):
        self.cfg = cfg
        self.instance_id = instance_id
        self.publisher = publisher
        self.lock = threading.Lock()
        self.cache = collections.OrderedDict()  # sequence hash -> None, oldest first
        self.next_event_id = 1
        self.running = {}  # request key -> tokens in its sequence so far

    def load(self):
        """Returns the engine's load: running requests and the KV blocks they and the cache hold."""
        with self.lock:
            decode_blocks = sum(-(-n // self.cfg.block_size) for n in self.running.values())
            m = worker_pb2.LoadMetrics(instance_id=self.instance_id, dp_rank=0, active_decode_blocks=decode_blocks,
                                       kv_blocks_used=len(self.cache), kv_blocks_total=self.cfg.kv_blocks,
                                       running_requests=len(self.running))
        m.timestamp.GetCurrentTime()
        return m

    def prefill(self, prompt):
        """Caches the prompt's full blocks; returns how many prompt tokens were cached already."""
        blocks = kvhash.hashes(prompt, self.cfg.block_size)
        with self.lock:
            cached = 0
            while cached < len(blocks) and blocks[cached][1] in self.cache:
                cached += 1
            events, run = [], []
            for i, (local, seq) in enumerate(blocks):
                if seq in self.cache:
                    self.cache.move_to_end(seq)
                    if run:
                        events.append(self._stored(run))
                        run = []
                    continue
                self.cache[seq] = None
                if not run:
                    run.append(blocks[i - 1][1] if i > 0 else None)  # the run's parent
                run.append(worker_pb2.KvBlock(sequence_hash=seq, local_hash=local))
            if run:
                events.append(self._stored(run))
            evicted = []
            while len(self.cache) > self.cfg.kv_blocks:
                evicted.append(self.cache.popitem(last=False)[0])
            if evicted:
                events.append(worker_pb2.KvCacheEvent(removed=worker_pb2.KvBlocksRemoved(sequence_hashes=evicted)))
            if events:
                batch = worker_pb2.KvEventBatch(instance_id=self.instance_id, dp_rank=0,
                                                first_event_id=self.next_event_id, events=events)
                self.next_event_id += len(events)
                self.publisher.publish(batch)
        return cached * self.cfg.block_size

    @staticmethod
    def _stored(run):
        parent, blocks = run[0], run[1:]
        stored = worker_pb2.KvBlocksStored(blocks=blocks)
        if parent is not None:
            stored.parent_sequence_hash = parent
        return worker_pb2.KvCacheEvent(stored=stored)

    def generate(self, call):
        req = worker_pb2.GenerateRequest()
        try:
            req.ParseFromString(call.payload)
        except DecodeError as e:
            raise requestplane.HandlerError("invalid_argument", "worker: invalid generate request: %s" % e) from e
        prompt = list(req.token_ids)
        if not prompt:
            raise requestplane.HandlerError("invalid_argument", "worker: invalid generate request: empty prompt")
        # The echo engine computes no probabilities and cannot constrain its
        # output: a request that asks for either is refused (the frontend
        # answers the client's 400 with this reason), never answered as if
        # it had been honoured.
        if req.HasField("guided_decoding"):
            raise requestplane.HandlerError("unimplemented", "worker: this echo engine does no guided decoding (structured outputs)")
        if req.HasField("logprobs") or req.HasField("prompt_logprobs"):
            raise requestplane.HandlerError("unimplemented", "worker: this echo engine computes no log probabilities")
        room = self.cfg.context_length - len(prompt)
        if room <= 0:
            raise requestplane.HandlerError("invalid_argument", "worker: prompt of %d tokens leaves no room in a "
                                            "context of %d" % (len(prompt), self.cfg.context_length))
        request_id = req.request_id or call.headers.get("x-request-id", "")
        max_tokens = min(req.max_tokens or room, room)
        stop_ids = set(req.stop.stop_token_ids)
        cached = self.prefill(prompt)
        key = object()
        i = 0
        try:
            for i in range(max_tokens):
                with self.lock:
                    self.running[key] = len(prompt) + i
                if call.cancelled.wait(self.cfg.token_delay) if self.cfg.token_delay > 0 else call.cancelled.is_set():
                    raise requestplane.Disconnected("cancelled")
                token = prompt[i % len(prompt)]
                resp = worker_pb2.GenerateResponse(token_ids=[token])
                if token in stop_ids and i + 1 >= req.stop.min_tokens:
                    resp.finish_reason = worker_pb2.FINISH_REASON_STOP
                elif i + 1 == max_tokens:
                    resp.finish_reason = worker_pb2.FINISH_REASON_LENGTH
                if resp.finish_reason:
                    resp.usage.prompt_tokens = len(prompt)
                    resp.usage.completion_tokens = i + 1
                    resp.usage.cached_prompt_tokens = cached
                call.send(resp.SerializeToString())
                if resp.finish_reason:
                    return
        except requestplane.Disconnected:
            info("generate cancelled", request_id=request_id, tokens=i)
            raise
        finally:
            with self.lock:
                self.running.pop(key, None)


def register(registry, cfg, instance, card, adopt, first, stop):
    """Grants a lease and registers instance and card on it (the lease id is
    the instance id); on failure it revokes the lease and raises. The card is
    retried on the same lease (register_card), so a registry replica that
    fails between the two calls does not cost the instance its id.

    adopt(lease_id) makes the engine's KV events carry the new instance id:
    on the first registration before the instance is registered (nobody can
    call the worker before, so no event goes out under an id routers do not
    list, and a request that comes as soon as the instance or its model card
    shows carries the right one); on a registration again once the instance
    is registered and before its card is (requests still running go on
    storing blocks: their events must not name an instance the registry does
    not list yet, or routers drop it as departed). Adopting only after the
    card was registered would leave a window in which a request routed to the
    new instance publishes its blocks under instance 0 (or the lost one),
    and a router never sees the worker's first blocks."""
    lease = Lease(registry, cfg.lease_ttl)
    try:
        if first:
            adopt(lease.id)
        inst = registry_pb2.Instance()
        inst.CopyFrom(instance)
        registry.Register(registry_pb2.RegisterRequest(instance=inst, lease_id=lease.id), timeout=10,
                          metadata=lease.metadata)
        if not first:
            adopt(lease.id)
        c = registry_pb2.ModelCard()
        c.CopyFrom(card)
        c.instance_id = lease.id
        register_card(registry, lease, c, stop)
    except BaseException:
        try:
            lease.close()
        except grpc.RpcError:
            pass
        raise
    return lease


def register_card(registry, lease, card, stop):
    """Registers card on lease, retrying with full-jitter backoff (100 ms to
    5 s) while the error is one a later call may not meet (a registry replica
    that lost etcd after the instance's call: the channel moves on to
    another) and the lease holds. Giving up at the first failure would revoke
    the lease, and every watcher would see a live instance deleted and
    registered again under a new id. Raises the last error once the error is
    final, the lease is lost or stop is set."""
    attempt = 0
    while True:
        try:
            registry.RegisterModel(registry_pb2.RegisterModelRequest(card=card, lease_id=lease.id), timeout=10,
                                   metadata=lease.metadata)
            return
        except grpc.RpcError as e:
            if e.code() not in RETRYABLE or lease.lost is not None or stop.is_set():
                raise
            wait = full_jitter(attempt, 0.1)
            attempt += 1
            log.warning("model card registration failed; retrying on the same lease", extra={"attrs": {
                "err": str(e.details()), "code": e.code().name, "backoff": round(wait, 3)}})
            if stop.wait(wait):
                raise


def register_again(registry, cfg, instance, card, adopt, stop):
    """Registers on a new lease after the old one was lost, retrying with
    full-jitter backoff (100 ms to 5 s) until it succeeds; None once stop is set."""
    attempt = 0
    while not stop.is_set():
        try:
            return register(registry, cfg, instance, card, adopt, first=False, stop=stop)
        except grpc.RpcError as e:
            wait = full_jitter(attempt, 0.1)
            attempt += 1
            log.warning("registering again failed; retrying", extra={"attrs": {"err": str(e), "backoff": round(wait, 3)}})
            stop.wait(wait)
    return None


# Codes a later attempt may not get: the control plane is away, restarting or
# overloaded (or its etcd is), or a connection was cut mid-call. Anything else
# (a refused name, missing credentials) no retry changes.
RETRYABLE = TRANSIENT + (grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
# Channel reconnection as pkg/grpcclient's: a registry that comes up (or
# back) is redialled within a second or two, not gRPC's default of up to two
# minutes.
CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
                   ("grpc.max_reconnect_backoff_ms", 2000))


def until_reachable(step, stop, what):
    """Runs step until it succeeds, retrying with full-jitter backoff (100 ms
    to 5 s) while its error may be the control plane being away or not up
    yet, as pkg/worker.Start does; None once stop is set. Other errors raise."""
    attempt = 0
    while not stop.is_set():
        try:
            return step()
        except grpc.RpcError as e:
            if e.code() not in RETRYABLE:
                raise
            wait = full_jitter(attempt, 0.1)
            attempt += 1
            log.warning(what + " failed; retrying", extra={"attrs": {
                "err": str(e.details()), "code": e.code().name, "backoff": round(wait, 3)}})
            stop.wait(wait)
    return None


def main(argv):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    cfg = parse_config(argv)
    info("config", **{k: ("<set>" if k == "auth_token" and v else v) for k, v in vars(cfg).items()})

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # SIGQUIT prints every thread's stack to stderr and goes on, as a Go
    # process prints its goroutines': how to see where a stuck worker waits.
    faulthandler.register(signal.SIGQUIT, all_threads=True)

    reg_channel = with_bearer(grpc.insecure_channel(cfg.registry_addr, options=CHANNEL_OPTIONS), cfg.auth_token)
    bus_channel = with_bearer(grpc.insecure_channel(cfg.eventbus_addr, options=CHANNEL_OPTIONS), cfg.auth_token)
    registry = registry_pb2_grpc.RegistryServiceStub(reg_channel)
    eventbus = eventbus_pb2_grpc.EventBusServiceStub(bus_channel)
    publisher = KvPublisher(eventbus, subject(cfg.namespace, cfg.component, KV_EVENTS_NAME),
                            core=cfg.kv_events_mode == "core")
    index = kvlocal.KvIndex(cfg.kv_events_ring)
    sink = KvSink(index, publisher if cfg.kv_events_mode in ("jetstream", "core") else None)
    api_stopping = threading.Event()
    lease = server = load = api = None
    code = 0
    try:
        # The servers come first (their addresses are registered), then the
        # tokenizer upload and the registration, each retried while the
        # control plane cannot be reached: a worker started before the
        # registry, its etcd or the eventbus serves meanwhile and registers
        # once they answer. Until then nobody calls it (callers find it in
        # the registry), and its instance id is 0.
        engine = EchoEngine(cfg, 0, sink)
        api = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16))
        servicer = kvlocal.Servicer(index, 0, api_stopping)
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, api)
        def adopt(lease_id):
            """The engine's events and the WorkerService name instance lease_id from now on."""
            with engine.lock:
                engine.instance_id = lease_id
                servicer.instance_id = lease_id

        def adopt_again(lease_id):
            """adopt, after a lost lease: routers of the JetStream plane know
            nothing of the new instance's cache, so an event says so before
            any other of it (unnumbered, and not in the local index: the
            engine still holds its blocks). Core and direct routers ask the
            new instance for its state instead."""
            with engine.lock:
                engine.instance_id = lease_id
                servicer.instance_id = lease_id
                if cfg.kv_events_mode == "jetstream":
                    publisher.publish(worker_pb2.KvEventBatch(instance_id=lease_id, dp_rank=0, events=[
                        worker_pb2.KvCacheEvent(cleared=worker_pb2.KvCacheCleared())]))

        api_port = api.add_insecure_port(cfg.worker_api_addr or "%s:0" % cfg.http_host)
        api_host = cfg.worker_api_addr.rsplit(":", 1)[0] if cfg.worker_api_addr else cfg.http_host
        if api_host in ("", "0.0.0.0", "[::]"):
            api_host = cfg.http_host
        api_addr = "%s:%d" % (api_host, api_port)
        api.start()
        server = requestplane.Server(cfg.http_host, cfg.http_port, cfg.http_root_path, {cfg.endpoint: engine.generate},
                                     cfg.max_message_size, cfg.http_host)
        server.start()
        # Serving from now on, registered or not (a caller that knows the
        # address, a test of a worker started before its registry).
        info("request plane serving", transport="http:" + server.base_url, worker_api=api_addr)
        artifacts = []
        if cfg.tokenizer_dir:
            paths = tokenizer_files(cfg.tokenizer_dir)
            artifacts = until_reachable(lambda: upload_tokenizer(eventbus, cfg.model_name, paths), stop, "tokenizer upload")
        instance = registry_pb2.Instance(namespace=cfg.namespace, component=cfg.component, endpoint=cfg.endpoint,
                                         transport=common_pb2.Transport(http=server.base_url),
                                         metadata={"worker": "python-example", "worker_api": api_addr},
                                         role=ROLES[cfg.disaggregation_mode])
        if artifacts is not None:  # None: stopped while waiting for the eventbus
            card = registry_pb2.ModelCard(namespace=cfg.namespace, component=cfg.component, endpoint=cfg.endpoint,
                                          model_name=cfg.model_name, block_size=cfg.block_size,
                                          context_length=cfg.context_length, tokenizer=artifacts)
            lease = until_reachable(lambda: register(registry, cfg, instance, card, adopt, first=True, stop=stop), stop,
                                    "registration")
        if lease is not None:
            load = LoadPublisher(eventbus, subject(cfg.namespace, cfg.component, LOAD_NAME), engine,
                                 cfg.load_interval)
            info("worker registered", instance="%x" % lease.id,
                 endpoint="%s/%s/%s" % (cfg.namespace, cfg.component, cfg.endpoint),
                 transport="http:" + server.base_url, model=cfg.model_name, worker_api=api_addr,
                 kv_events_mode=cfg.kv_events_mode)
        while lease is not None and not stop.wait(0.2):
            if not lease.done.is_set():
                continue
            # The registry no longer has the lease (revoked, or expired while
            # it was away): register again on a new lease, same endpoint and
            # card. The engine keeps serving all along.
            old = lease
            error("registration lost; registering again", instance="%x" % old.id, err=str(old.lost))
            old.close()
            lease = register_again(registry, cfg, instance, card, adopt_again, stop)
            if lease is None:
                break
            info("worker registered again", instance="%x" % lease.id, previous_instance="%x" % old.id)
    except (grpc.RpcError, OSError, ValueError) as e:
        error("worker failed to start", err=str(e) or type(e).__name__)
        code = 1
    finally:
        info("worker shutting down: deregistering, then draining", drain_timeout=cfg.drain_timeout)
        if lease is not None:
            try:
                lease.close()
            except grpc.RpcError as e:
                error("deregister failed", err=str(e))
                code = 1
        if server is not None:
            if not server.drain(cfg.drain_timeout):
                log.warning("drain timed out; cancelling the remaining requests")
            server.close()
        if load is not None:
            load.close()
        if api is not None:
            api_stopping.set()
            api.stop(grace=1).wait()
        publisher.close(timeout=10)
        reg_channel.close()
        bus_channel.close()
        info("worker stopped", exit_code=code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
