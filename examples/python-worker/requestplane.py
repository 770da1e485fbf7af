"""Switchyard's HTTP request plane, served with nothing but the standard library.

The wire format is pkg/transport's http plane: a call is POST {root}/{endpoint}
with the request payload as the body; request headers travel as HTTP headers
"Dyn-Hdr-{key}", except traceparent, tracestate and x-request-id, which keep
their own names. The answer is 200 with Content-Type
application/x-switchyard-frames and a body of frames, each

    type    uint8             2 data, 3 end, 4 error
    length  uint32 big-endian
    payload

data frames carry one response payload each, the end frame (empty) closes the
stream cleanly and an error frame (uint16 big-endian code length, code,
message) closes it with an error. A rejected call gets a non-200 status (404
no handler, 405 not POST, 413 too large, 503 draining, 400 malformed) whose
body is one error frame.

http.server speaks HTTP/1.1; Switchyard's Go client speaks HTTP/2 cleartext
with prior knowledge (h2c), so a connection that opens with the HTTP/2
preface is handed to H2Connection (RFC 9113, server side, no push), and both
protocols share one port as they do in the Go server.
"""

import http.server
import logging
import select
import socket
import struct
import threading

import hpack

FRAME_DATA = 2
FRAME_END = 3
FRAME_ERROR = 4
CONTENT_TYPE = "application/x-switchyard-frames"
HEADER_PREFIX = "dyn-hdr-"
STANDARD_HEADERS = ("traceparent", "tracestate", "x-request-id")

CODE_UNKNOWN = "unknown"
CODE_TOO_LARGE = "too_large"
CODE_DRAINING = "draining"
CODE_NO_HANDLER = "no_handler"

log = logging.getLogger("requestplane")


class HandlerError(Exception):
    """An error that travels to the caller as an error frame."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


class Disconnected(Exception):
    """The caller went away or the call was cancelled."""


def encode_frame(typ, payload=b""):
    return struct.pack(">BI", typ, len(payload)) + payload


def encode_error(code, message):
    c = code.encode()[:0xFFFF]
    return struct.pack(">H", len(c)) + c + message.encode()


class Call:
    """One incoming call as a handler sees it.

    cancelled is set when the caller cancels or disconnects; a handler waits
    on it instead of sleeping so that it stops at once.
    """

    def __init__(self, endpoint, headers, payload, send_frame):
        self.endpoint = endpoint
        self.headers = headers
        self.payload = payload
        self.cancelled = threading.Event()
        self._send_frame = send_frame

    def send(self, payload):
        """Sends one response payload; raises Disconnected once the caller is gone."""
        if self.cancelled.is_set():
            raise Disconnected("call cancelled")
        try:
            self._send_frame(FRAME_DATA, payload)
        except (OSError, Disconnected) as e:
            self.cancelled.set()
            raise Disconnected(str(e)) from e


class Server:
    """Serves endpoints on the HTTP request plane (HTTP/1.1 and h2c on one port).

    handlers maps an endpoint name to a function(call) that sends responses
    with call.send and returns (end frame) or raises (error frame).
    """

    def __init__(self, host, port, root, handlers, max_size, advertise_host):
        self.root = root.rstrip("/")
        self.handlers = handlers
        self.max_size = max_size
        self._lock = threading.Condition()
        self._inflight = 0
        self._draining = False
        self._conns = set()
        plane = self

        class Handler(_HTTP1Handler):
            server_plane = plane

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = "http://%s:%d%s" % (advertise_host, self.port, self.root)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http-serve", daemon=True)

    def start(self):
        self._thread.start()

    # -- shared by both protocols ------------------------------------------

    def parse(self, method, path, headers, content_length):
        """Validates a call; returns (endpoint, transport headers) or raises
        _Rejected with the status and error frame."""
        if method != "POST":
            raise _Rejected(405, CODE_UNKNOWN, "method %s not allowed; use POST" % method)
        path = path.split("?", 1)[0]
        prefix = self.root + "/"
        rest = path[len(prefix):] if path.startswith(prefix) else ""
        if not rest or "/" in rest:
            raise _Rejected(404, CODE_NO_HANDLER, "path %r is not %s/{endpoint}" % (path, self.root))
        if content_length is not None and content_length > self.max_size:
            raise _Rejected(413, CODE_TOO_LARGE, "request payload of %d bytes exceeds the limit of %d bytes"
                            % (content_length, self.max_size))
        h = {}
        for name, value in headers:
            k = name.lower()
            if k in STANDARD_HEADERS:
                h.setdefault(k, value)
            elif k.startswith(HEADER_PREFIX) and len(k) > len(HEADER_PREFIX):
                h.setdefault(k[len(HEADER_PREFIX):], value)
        return rest, h

    def admit(self, endpoint, payload):
        """Checks the payload and the handler and counts the call in flight."""
        if len(payload) > self.max_size:
            raise _Rejected(413, CODE_TOO_LARGE, "request payload of %d bytes exceeds the limit of %d bytes"
                            % (len(payload), self.max_size))
        handler = self.handlers.get(endpoint)
        if handler is None:
            raise _Rejected(404, CODE_NO_HANDLER, "no handler for endpoint %r" % endpoint)
        with self._lock:
            if self._draining:
                raise _Rejected(503, CODE_DRAINING, "server is draining")
            self._inflight += 1
        return handler

    def run(self, handler, call, end):
        """Runs a handler, then ends the stream with end(type, payload)."""
        try:
            handler(call)
        except Disconnected:
            return
        except HandlerError as e:
            end(FRAME_ERROR, encode_error(e.code, e.message))
        except Exception as e:  # a bug in the handler still answers the caller
            log.exception("handler failed")
            end(FRAME_ERROR, encode_error(CODE_UNKNOWN, "%s: %s" % (type(e).__name__, e)))
        else:
            if not call.cancelled.is_set():
                end(FRAME_END, b"")
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()

    def track(self, conn, add):
        with self._lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    # -- shutdown ----------------------------------------------------------

    def drain(self, timeout):
        """Refuses new calls (503 draining) and waits up to timeout seconds
        for the calls in flight; returns whether they all finished."""
        with self._lock:
            self._draining = True
            return self._lock.wait_for(lambda: self._inflight == 0, timeout)

    def close(self):
        """Stops accepting, closes every connection (cancelling its calls)
        and waits for the accept loop."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join()


class _Rejected(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.body = encode_frame(FRAME_ERROR, encode_error(code, message))


class _HTTP1Handler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 calls, and the switch to h2c on the HTTP/2 preface."""

    protocol_version = "HTTP/1.1"
    server_plane = None  # set by Server

    def setup(self):
        super().setup()
        self.server_plane.track(self.connection, True)

    def finish(self):
        self.server_plane.track(self.connection, False)
        super().finish()

    def log_message(self, format, *args):
        log.debug("http: " + format, *args)

    def parse_request(self):
        if self.raw_requestline == b"PRI * HTTP/2.0\r\n":
            rest = self.rfile.read(8)
            if rest == b"\r\nSM\r\n\r\n":
                H2Connection(self.server_plane, self.connection, self.rfile).serve()
            self.close_connection = True
            return False
        return super().parse_request()

    def _reject(self, e):
        self.send_response(e.status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(e.body)))
        self.end_headers()
        self.wfile.write(e.body)

    def _read_body(self, limit):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = bytearray()
            while True:
                size = int(self.rfile.readline(1024).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(body)
                if len(body) + size > limit:
                    self.close_connection = True
                    raise _Rejected(413, CODE_TOO_LARGE, "request payload exceeds the limit of %d bytes" % limit)
                body += self.rfile.read(size)
                self.rfile.readline(3)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def do_POST(self):
        plane = self.server_plane
        try:
            length = self.headers.get("Content-Length")
            endpoint, headers = plane.parse("POST", self.path, self.headers.items(),
                                            int(length) if length else None)
            payload = self._read_body(plane.max_size)
            handler = plane.admit(endpoint, payload)
        except _Rejected as e:
            if e.status == 413:
                self.close_connection = True  # the body was not read
            self._reject(e)
            return
        except ValueError:
            self.close_connection = True
            self._reject(_Rejected(400, CODE_UNKNOWN, "malformed request body framing"))
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        lock = threading.Lock()

        def send_frame(typ, payload):
            data = encode_frame(typ, payload)
            with lock:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def end(typ, payload):
            try:
                send_frame(typ, payload)
                with lock:
                    self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self.close_connection = True

        call = Call(endpoint, headers, payload, send_frame)
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(call, done), name="http1-watch", daemon=True)
        watcher.start()
        try:
            plane.run(handler, call, end)
        finally:
            done.set()
            watcher.join()
        if call.cancelled.is_set():
            self.close_connection = True

    def _watch(self, call, done):
        """Cancels the call when the client closes its connection: HTTP/1.1
        has no other cancel signal."""
        sock = self.connection
        while not done.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], 0.05)
                if not readable:
                    continue
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    call.cancelled.set()
                return  # closed, or a pipelined request we cannot judge by
            except (OSError, ValueError):
                call.cancelled.set()
                return

    def _not_allowed(self):
        self.close_connection = True
        self._reject(_Rejected(405, CODE_UNKNOWN, "method %s not allowed; use POST" % self.command))

    do_GET = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


# HTTP/2 frame types, flags, settings and error codes (RFC 9113).
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS, _PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = range(10)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
_SETTINGS_HEADER_TABLE_SIZE, _SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x3
_SETTINGS_INITIAL_WINDOW_SIZE, _SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
_NO_ERROR, _PROTOCOL_ERROR, _FLOW_CONTROL_ERROR, _REFUSED_STREAM, _CANCEL, _COMPRESSION_ERROR = 0x0, 0x1, 0x3, 0x7, 0x8, 0x9
_RECV_WINDOW = 1 << 20  # what we let a client send per stream before we read it
_MAX_STREAMS = 1000


class _H2Error(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _H2Stream:
    def __init__(self, sid, send_window):
        self.id = sid
        self.headers = None
        self.body = bytearray()
        self.send_window = send_window
        self.call = None
        self.closed = False  # reset by the client, or finished by us


class H2Connection:
    """The server side of one HTTP/2 cleartext connection.

    The thread that calls serve reads frames; each call runs on its own
    thread and writes its frames under the connection's lock, waiting for
    flow-control window when the client has none to give.
    """

    def __init__(self, plane, sock, rfile):
        self.plane = plane
        self.sock = sock
        self.rfile = rfile
        self.decoder = hpack.Decoder()
        self.cond = threading.Condition()  # guards everything below and socket writes
        self.streams = {}
        self.conn_window = 65535
        self.initial_window = 65535
        self.max_frame = 16384
        self.last_stream = 0
        self.gone = False

    # -- writing -----------------------------------------------------------

    def _write(self, typ, flags, sid, payload=b""):
        """Writes one frame; the caller holds cond."""
        if self.gone:
            raise Disconnected("connection closed")
        self.sock.sendall(struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", typ, flags, sid) + payload)

    def _send_data(self, st, data, end_stream):
        """Sends data on a stream within the flow-control windows."""
        with self.cond:
            while True:
                while data:
                    if self.gone or st.closed:
                        raise Disconnected("stream closed")
                    n = min(len(data), self.max_frame, self.conn_window, st.send_window)
                    if n <= 0:
                        self.cond.wait()
                        continue
                    self.conn_window -= n
                    st.send_window -= n
                    self._write(_DATA, _END_STREAM if end_stream and n == len(data) else 0, st.id, data[:n])
                    data = data[n:]
                    if end_stream and not data:
                        return
                if end_stream:
                    if self.gone or st.closed:
                        raise Disconnected("stream closed")
                    self._write(_DATA, _END_STREAM, st.id)
                return

    def _send_headers(self, st, status, end_stream=False):
        block = hpack.encode([(":status", str(status)), ("content-type", CONTENT_TYPE)])
        with self.cond:
            self._write(_HEADERS, _END_HEADERS | (_END_STREAM if end_stream else 0), st.id, block)

    # -- reading -----------------------------------------------------------

    def _read_frame(self):
        head = self.rfile.read(9)
        if len(head) < 9:
            return None
        length = int.from_bytes(head[:3], "big")
        typ, flags, sid = struct.unpack(">BBI", head[3:])
        if length > 16384:  # we never raise SETTINGS_MAX_FRAME_SIZE
            raise _H2Error(_PROTOCOL_ERROR, "frame of %d bytes" % length)
        payload = self.rfile.read(length)
        if len(payload) < length:
            return None
        return typ, flags, sid & 0x7FFFFFFF, payload

    def serve(self):
        try:
            with self.cond:
                settings = struct.pack(">HIHI", _SETTINGS_MAX_CONCURRENT_STREAMS, _MAX_STREAMS,
                                       _SETTINGS_INITIAL_WINDOW_SIZE, _RECV_WINDOW)
                self._write(_SETTINGS, 0, 0, settings)
                self._write(_WINDOW_UPDATE, 0, 0, struct.pack(">I", _RECV_WINDOW))
            self._loop()
        except _H2Error as e:
            log.debug("h2: closing connection: %s", e)
            try:
                with self.cond:
                    self._write(_GOAWAY, 0, 0, struct.pack(">II", self.last_stream, e.code) + str(e).encode())
            except (OSError, Disconnected):
                pass
        except (OSError, ValueError):
            pass
        finally:
            with self.cond:
                self.gone = True
                for st in self.streams.values():
                    if st.call is not None:
                        st.call.cancelled.set()
                self.cond.notify_all()

    def _loop(self):
        pending = None  # the stream whose header block continues
        block = b""
        while True:
            frame = self._read_frame()
            if frame is None:
                return
            typ, flags, sid, payload = frame
            if pending is not None and typ != _CONTINUATION:
                raise _H2Error(_PROTOCOL_ERROR, "expected CONTINUATION")
            if typ == _HEADERS:
                if sid == 0 or sid % 2 == 0:
                    raise _H2Error(_PROTOCOL_ERROR, "HEADERS on stream %d" % sid)
                payload = self._strip_padding(flags, payload)
                if flags & _PRIORITY_FLAG:
                    payload = payload[5:]
                st = self.streams.get(sid)
                if st is None:
                    if sid <= self.last_stream:
                        raise _H2Error(_PROTOCOL_ERROR, "stream %d reused" % sid)
                    self.last_stream = sid
                    with self.cond:
                        st = self.streams[sid] = _H2Stream(sid, self.initial_window)
                st.end_after_headers = bool(flags & _END_STREAM)
                if flags & _END_HEADERS:
                    self._headers_done(st, payload)
                else:
                    pending, block = st, payload
            elif typ == _CONTINUATION:
                if pending is None or sid != pending.id:
                    raise _H2Error(_PROTOCOL_ERROR, "unexpected CONTINUATION")
                block += payload
                if flags & _END_HEADERS:
                    st, pending = pending, None
                    self._headers_done(st, block)
            elif typ == _DATA:
                self._on_data(flags, sid, payload)
            elif typ == _SETTINGS:
                self._on_settings(flags, payload)
            elif typ == _WINDOW_UPDATE:
                if len(payload) != 4:
                    raise _H2Error(_PROTOCOL_ERROR, "WINDOW_UPDATE of %d bytes" % len(payload))
                inc = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
                with self.cond:
                    if sid == 0:
                        self.conn_window += inc
                    elif sid in self.streams:
                        self.streams[sid].send_window += inc
                    self.cond.notify_all()
            elif typ == _PING:
                if not flags & _ACK:
                    with self.cond:
                        self._write(_PING, _ACK, 0, payload)
            elif typ == _RST_STREAM:
                self._close_stream(sid, cancel=True)
            elif typ == _GOAWAY:
                return
            elif typ == _PUSH_PROMISE:
                raise _H2Error(_PROTOCOL_ERROR, "PUSH_PROMISE from a client")
            # PRIORITY and unknown frame types are ignored.

    @staticmethod
    def _strip_padding(flags, payload):
        if not flags & _PADDED:
            return payload
        if not payload or payload[0] >= len(payload):
            raise _H2Error(_PROTOCOL_ERROR, "bad padding")
        return payload[1:len(payload) - payload[0]]

    def _headers_done(self, st, block):
        try:
            fields = self.decoder.decode(block)
        except hpack.HPACKError as e:
            raise _H2Error(_COMPRESSION_ERROR, str(e)) from e
        if st.headers is not None:
            # Trailers: they can only end the request.
            if st.end_after_headers:
                self._request_done(st)
            return
        st.headers = fields
        if st.end_after_headers:
            self._request_done(st)

    def _on_data(self, flags, sid, payload):
        st = self.streams.get(sid)
        size = len(payload)
        payload = self._strip_padding(flags, payload)
        with self.cond:
            if size:
                # Give the window back at once: the body is bounded by max_size.
                self._write(_WINDOW_UPDATE, 0, 0, struct.pack(">I", size))
                if st is not None and not flags & _END_STREAM:
                    self._write(_WINDOW_UPDATE, 0, sid, struct.pack(">I", size))
        if st is None or st.call is not None:
            return  # a stream we already answered or reset
        if len(st.body) + len(payload) <= self.plane.max_size + 1:
            st.body += payload
        if flags & _END_STREAM:
            self._request_done(st)

    def _on_settings(self, flags, payload):
        if flags & _ACK:
            return
        if len(payload) % 6:
            raise _H2Error(_PROTOCOL_ERROR, "SETTINGS of %d bytes" % len(payload))
        with self.cond:
            for i in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[i:i + 6])
                if key == _SETTINGS_INITIAL_WINDOW_SIZE:
                    if value > 0x7FFFFFFF:
                        raise _H2Error(_FLOW_CONTROL_ERROR, "initial window %d" % value)
                    for st in self.streams.values():
                        st.send_window += value - self.initial_window
                    self.initial_window = value
                elif key == _SETTINGS_MAX_FRAME_SIZE:
                    if not 16384 <= value <= (1 << 24) - 1:
                        raise _H2Error(_PROTOCOL_ERROR, "max frame size %d" % value)
                    self.max_frame = value
                # HEADER_TABLE_SIZE bounds a dynamic table our encoder never uses.
            self._write(_SETTINGS, _ACK, 0)
            self.cond.notify_all()

    def _close_stream(self, sid, cancel):
        with self.cond:
            st = self.streams.pop(sid, None)
            if st is None:
                return
            st.closed = True
            if cancel and st.call is not None:
                st.call.cancelled.set()
            self.cond.notify_all()

    def _request_done(self, st):
        hdrs = {}
        others = []
        for k, v in st.headers:
            if k.startswith(":"):
                hdrs[k] = v
            else:
                others.append((k, v))
        length = next((v for k, v in others if k == "content-length"), None)
        try:
            try:
                endpoint, headers = self.plane.parse(hdrs.get(":method", ""), hdrs.get(":path", ""), others,
                                                     int(length) if length else None)
            except ValueError:
                raise _Rejected(400, CODE_UNKNOWN, "malformed content-length %r" % length) from None
            payload = bytes(st.body)
            handler = self.plane.admit(endpoint, payload)
        except _Rejected as e:
            st.call = Call("", {}, b"", None)  # answered: later DATA is ignored
            threading.Thread(target=self._reject, args=(st, e), name="h2-reject", daemon=True).start()
            return
        call = Call(endpoint, headers, payload, lambda typ, p: self._send_data(st, encode_frame(typ, p), False))
        st.call = call
        st.body = bytearray()
        threading.Thread(target=self._run, args=(st, handler, call), name="h2-call", daemon=True).start()

    def _reject(self, st, e):
        try:
            self._send_headers(st, e.status)
            self._send_data(st, e.body, True)
        except (OSError, Disconnected):
            pass
        self._close_stream(st.id, cancel=False)

    def _run(self, st, handler, call):
        def end(typ, payload):
            try:
                self._send_data(st, encode_frame(typ, payload), True)
            except (OSError, Disconnected):
                call.cancelled.set()

        try:
            self._send_headers(st, 200)
        except (OSError, Disconnected):
            call.cancelled.set()
        self.plane.run(handler, call, end)
        if call.cancelled.is_set() and not st.closed:
            try:
                with self.cond:
                    self._write(_RST_STREAM, 0, st.id, struct.pack(">I", _CANCEL))
            except (OSError, Disconnected):
                pass
        self._close_stream(st.id, cancel=False)
