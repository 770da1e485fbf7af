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
preface is handed to H2Connection (RFC 9113, server side, no push, on
python3-h2), and both protocols share one port as they do in the Go server.
"""

import http.server
import logging
import select
import socket
import struct
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

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


_RECV_WINDOW = 1 << 20  # what we let a client send per stream before we read it
_MAX_STREAMS = 1000
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class _H2Stream:
    def __init__(self, sid):
        self.id = sid
        self.headers = None
        self.body = bytearray()
        self.call = None
        self.closed = False  # reset by the client, or finished by us


class H2Connection:
    """The server side of one HTTP/2 cleartext connection, on python3-h2's
    state machine (framing, HPACK, settings, pings and flow-control
    accounting are h2's).

    The thread that calls serve reads from the socket and feeds h2; each call
    runs on its own thread and sends under the connection's lock, waiting
    for flow-control window when the client has none to give.
    """

    def __init__(self, plane, sock, rfile):
        self.plane = plane
        self.sock = sock
        self.rfile = rfile
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8"))
        self.cond = threading.Condition()  # guards self.conn, the streams and socket writes
        self.streams = {}
        self.gone = False

    def _flush(self):
        """Writes what h2 has queued; the caller holds cond."""
        data = self.conn.data_to_send()
        if data:
            if self.gone:
                raise Disconnected("connection closed")
            self.sock.sendall(data)

    def _send_data(self, st, data, end_stream):
        """Sends data on a stream within the flow-control windows."""
        with self.cond:
            while True:
                if self.gone or st.closed:
                    raise Disconnected("stream closed")
                try:
                    if not data:
                        if end_stream:
                            self.conn.end_stream(st.id)
                            self._flush()
                        return
                    n = min(len(data), self.conn.local_flow_control_window(st.id), self.conn.max_outbound_frame_size)
                    if n <= 0:
                        self.cond.wait()
                        continue
                    last = end_stream and n == len(data)
                    self.conn.send_data(st.id, data[:n], end_stream=last)
                    self._flush()
                except h2.exceptions.StreamClosedError:
                    raise Disconnected("stream closed") from None
                data = data[n:]
                if last:
                    return

    def _send_headers(self, st, status, end_stream=False):
        with self.cond:
            if self.gone or st.closed:
                raise Disconnected("stream closed")
            try:
                self.conn.send_headers(st.id, [(":status", str(status)), ("content-type", CONTENT_TYPE)],
                                       end_stream=end_stream)
            except h2.exceptions.StreamClosedError:
                raise Disconnected("stream closed") from None
            self._flush()

    def serve(self):
        try:
            with self.cond:
                self.conn.local_settings = h2.settings.Settings(client=False, initial_values={
                    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: _MAX_STREAMS,
                    h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _RECV_WINDOW})
                self.conn.initiate_connection()
                self.conn.increment_flow_control_window(_RECV_WINDOW)
                # The preface was read by the HTTP/1.1 handler; h2 wants it.
                self._handle(self.conn.receive_data(_PREFACE))
                self._flush()
            while True:
                data = self.rfile.read1(65536)
                if not data:
                    return
                with self.cond:
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError as e:
                        log.debug("h2: closing connection: %s", e)
                        self._flush()  # h2 queued a GOAWAY
                        return
                    done = self._handle(events)
                    self._flush()
                if done:
                    return
        except (OSError, ValueError, Disconnected):
            pass
        finally:
            with self.cond:
                self.gone = True
                for st in self.streams.values():
                    if st.call is not None:
                        st.call.cancelled.set()
                self.cond.notify_all()

    def _handle(self, events):
        """Acts on h2's events; the caller holds cond. True when the client
        has ended the connection."""
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                st = self.streams[ev.stream_id] = _H2Stream(ev.stream_id)
                st.headers = [(k.lower(), v) for k, v in ev.headers]
            elif isinstance(ev, h2.events.DataReceived):
                # Give the window back at once: the body is bounded by max_size.
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                st = self.streams.get(ev.stream_id)
                if st is not None and st.call is None and len(st.body) + len(ev.data) <= self.plane.max_size + 1:
                    st.body += ev.data
            elif isinstance(ev, h2.events.StreamEnded):
                st = self.streams.get(ev.stream_id)
                if st is not None and st.call is None and st.headers is not None:
                    self._request_done(st)
            elif isinstance(ev, h2.events.StreamReset):
                self._close_stream(ev.stream_id, cancel=True)
            elif isinstance(ev, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                self.cond.notify_all()
            elif isinstance(ev, h2.events.ConnectionTerminated):
                return True
        return False

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
                    self.conn.reset_stream(st.id, error_code=h2.errors.ErrorCodes.CANCEL)
                    self._flush()
            except (OSError, Disconnected, h2.exceptions.StreamClosedError):
                pass
        self._close_stream(st.id, cancel=False)
