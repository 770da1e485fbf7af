"""The worker's local indexer and its WorkerService, as pkg/worker has them:
the blocks the worker holds per dp rank (from its own KV events), a bounded
ring of its recent events with their ids, served over gRPC so that routers
in the core and direct KV event modes fill gaps and rebuild without a broker
(GetKvEvents, GetKvState, WatchKvEvents; see proto/switchyard/worker/v1)."""

import threading

import grpc

from switchyard.worker.v1 import worker_pb2, worker_pb2_grpc

MAX_EVENTS_PER_CALL = 8192  # as pkg/worker: under gRPC's 4 MiB
STATE_CHUNK = 65536
# The ErrorInfo of an event id the ring no longer reaches (pkg/apierr).
OUT_OF_RANGE_REASON = "KV_EVENTS_OUT_OF_RANGE"


class OutOfRange(Exception):
    pass


class _Rank:
    def __init__(self):
        self.blocks = set()
        self.last = 0  # newest event id
        self.ring = []  # newest events, oldest at head once full
        self.head = 0


class KvIndex:
    """Blocks and recent events per dp rank; safe for concurrent use."""

    def __init__(self, ring):
        self.ring_cap = max(1, ring)
        self.cond = threading.Condition()
        self.ranks = {}
        self.seq = 0  # counts applies, for watchers

    def apply(self, batch):
        """Applies a batch of the worker's own events, numbering it when its
        first_event_id is 0; an id that does not follow on restarts the ring."""
        if not batch.events:
            return
        with self.cond:
            r = self.ranks.setdefault(batch.dp_rank, _Rank())
            if batch.first_event_id == 0:
                batch.first_event_id = r.last + 1
            elif batch.first_event_id != r.last + 1:
                r.ring, r.head = [], 0
            for ev in batch.events:
                kind = ev.WhichOneof("event")
                if kind == "stored":
                    r.blocks.update(b.sequence_hash for b in ev.stored.blocks)
                elif kind == "removed":
                    r.blocks.difference_update(ev.removed.sequence_hashes)
                elif kind == "cleared":
                    r.blocks.clear()
                if len(r.ring) < self.ring_cap:
                    r.ring.append(ev)
                else:
                    r.ring[r.head] = ev
                    r.head = (r.head + 1) % len(r.ring)
            r.last = batch.first_event_id + len(batch.events) - 1
            self.seq += 1
            self.cond.notify_all()

    def events(self, rank, start, limit=0):
        """Returns (events from id start on, the rank's last id); raises
        OutOfRange when start is older than the ring."""
        limit = MAX_EVENTS_PER_CALL if limit <= 0 or limit > MAX_EVENTS_PER_CALL else limit
        start = max(start, 1)
        with self.cond:
            r = self.ranks.get(rank)
            if r is None or start > r.last:
                return [], (r.last if r else 0)
            oldest = r.last - len(r.ring) + 1
            if start < oldest:
                raise OutOfRange("rank %d event %d asked, the ring holds %d..%d" % (rank, start, oldest, r.last))
            skip = start - oldest
            n = min(len(r.ring) - skip, limit)
            return [r.ring[(r.head + skip + i) % len(r.ring)] for i in range(n)], r.last

    def state(self):
        with self.cond:
            return [(rank, r.last, list(r.blocks)) for rank, r in self.ranks.items()]

    def last(self):
        with self.cond:
            return {rank: r.last for rank, r in self.ranks.items()}, self.seq

    def wait(self, seq, timeout):
        """Waits until an apply after seq, or timeout seconds."""
        with self.cond:
            self.cond.wait_for(lambda: self.seq != seq, timeout)


def _out_of_range(context, e):
    # The reason travels as text here: the Python stubs have no
    # google.rpc.Status helper without grpcio-status; the code is enough for
    # Switchyard's router, which rebuilds on OUT_OF_RANGE.
    context.abort(grpc.StatusCode.OUT_OF_RANGE, "%s: %s" % (OUT_OF_RANGE_REASON, e))


class Servicer(worker_pb2_grpc.WorkerServiceServicer):
    """WorkerService over a KvIndex; Generate stays on the request plane."""

    def __init__(self, index, instance_id, stopping):
        self.index = index
        self.instance_id = instance_id
        self.stopping = stopping

    def GetKvEvents(self, request, context):
        try:
            evs, last = self.index.events(request.dp_rank, request.from_event_id, request.max_events)
        except OutOfRange as e:
            _out_of_range(context, e)
        batch = worker_pb2.KvEventBatch(instance_id=self.instance_id, dp_rank=request.dp_rank,
                                        first_event_id=max(request.from_event_id, 1), events=evs)
        return worker_pb2.GetKvEventsResponse(batch=batch, last_event_id=last)

    def GetKvState(self, request, context):
        for rank, last, hashes in self.index.state():
            i = 0
            while True:
                part = hashes[i:i + STATE_CHUNK]
                i += len(part)
                yield worker_pb2.GetKvStateResponse(instance_id=self.instance_id, dp_rank=rank, event_id=last,
                                                    sequence_hashes=part, last=i >= len(hashes))
                if i >= len(hashes):
                    break

    def WatchKvEvents(self, request, context):
        nxt = {rank: max(i, 1) for rank, i in request.from_event_ids.items()}
        while context.is_active() and not self.stopping.is_set():
            last, seq = self.index.last()
            sent = False
            for rank, l in last.items():
                start = nxt.get(rank, 1)
                if start > l:
                    continue
                try:
                    evs, _ = self.index.events(rank, start)
                except OutOfRange as e:
                    _out_of_range(context, e)
                if evs:
                    yield worker_pb2.WatchKvEventsResponse(batch=worker_pb2.KvEventBatch(
                        instance_id=self.instance_id, dp_rank=rank, first_event_id=start, events=evs))
                    nxt[rank] = start + len(evs)
                    sent = True
            if not sent:
                self.index.wait(seq, 0.5)
        if self.stopping.is_set():
            context.abort(grpc.StatusCode.UNAVAILABLE, "worker shutting down")
