package transportbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// handler answers a benchmark request on any plane.
func handler(ctx context.Context, req *transport.Request, w transport.ResponseWriter) error {
	n, size := parseRequest(req.Payload)
	buf := make([]byte, size)
	for range n {
		if err := w.Send(buf); err != nil {
			return err
		}
	}
	return nil
}

// planeSystem runs one Switchyard plane in process.
type planeSystem struct {
	label string
	srv   transport.Server
	cli   transport.Client
	addr  transport.Address
	stop  func()
}

func (p *planeSystem) name() string { return p.label }

func (p *planeSystem) stream(ctx context.Context, req []byte) (int, error) {
	st, err := p.cli.Call(ctx, p.addr, "bench", nil, req)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

func (p *planeSystem) close() {
	p.cli.Close()
	p.srv.Close()
	if p.stop != nil {
		p.stop()
	}
}

func startPlane(plane transport.Plane, natsURL string, stop func()) (system, error) {
	cfg := transport.DefaultConfig()
	cfg.Plane = plane
	cfg.TCP.Host, cfg.HTTP.Host, cfg.HTTP.Port = "127.0.0.1", "127.0.0.1", 0
	if natsURL != "" {
		cfg.NATS.URL = natsURL
	}
	srv, err := transport.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	srv.Handle("bench", handler)
	if err := srv.Start(context.Background()); err != nil {
		return nil, err
	}
	cli, err := transport.NewClient(cfg)
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &planeSystem{label: string(plane), srv: srv, cli: cli, addr: srv.Address("bench"), stop: stop}, nil
}

func startTCP() (system, error)  { return startPlane(transport.PlaneTCP, "", nil) }
func startHTTP() (system, error) { return startPlane(transport.PlaneHTTP, "", nil) }

func startNATS() (system, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		return nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats-server not ready")
	}
	return startPlane(transport.PlaneNATS, ns.ClientURL(), func() { ns.Shutdown(); ns.WaitForShutdown() })
}

// floorSystem is a bare loopback TCP echo: a length-prefixed request in,
// n length-prefixed responses out, one connection per concurrent caller.
type floorSystem struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	idle  []*floorConn
	conns []net.Conn
}

type floorConn struct {
	c   net.Conn
	r   *bufio.Reader
	w   *bufio.Writer
	buf []byte
}

func startFloor() (system, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &floorSystem{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				floorServe(c)
			}()
		}
	}()
	return f, nil
}

func floorServe(c net.Conn) {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 64<<10), bufio.NewWriterSize(c, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(r, req); err != nil {
			return
		}
		n, size := parseRequest(req)
		buf := make([]byte, size)
		for range n {
			binary.BigEndian.PutUint32(hdr[:], uint32(size))
			w.Write(hdr[:])
			w.Write(buf)
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func (f *floorSystem) name() string { return "floor" }

func (f *floorSystem) stream(ctx context.Context, req []byte) (int, error) {
	f.mu.Lock()
	var fc *floorConn
	if len(f.idle) > 0 {
		fc = f.idle[len(f.idle)-1]
		f.idle = f.idle[:len(f.idle)-1]
	}
	f.mu.Unlock()
	if fc == nil {
		c, err := net.Dial("tcp", f.ln.Addr().String())
		if err != nil {
			return 0, err
		}
		fc = &floorConn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10), buf: make([]byte, 64<<10)}
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(req)))
	fc.w.Write(hdr[:])
	fc.w.Write(req)
	if err := fc.w.Flush(); err != nil {
		return 0, err
	}
	want, _ := parseRequest(req)
	buf := fc.buf
	for i := range want {
		if _, err := io.ReadFull(fc.r, hdr[:]); err != nil {
			return i, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if _, err := io.ReadFull(fc.r, buf[:n]); err != nil {
			return i, err
		}
	}
	f.mu.Lock()
	f.idle = append(f.idle, fc)
	f.mu.Unlock()
	return want, nil
}

func (f *floorSystem) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, fc := range f.idle {
		fc.c.Close()
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// rawCodec passes []byte messages through gRPC without protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// benchService is the gRPC handler type; it has no methods.
type benchService interface{}

var benchDesc = grpc.ServiceDesc{
	ServiceName: "switchyard.bench.v1.BenchService",
	HandlerType: (*benchService)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		Handler: func(_ any, ss grpc.ServerStream) error {
			var req []byte
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			n, size := parseRequest(req)
			buf := make([]byte, size)
			for range n {
				if err := ss.SendMsg(&buf); err != nil {
					return err
				}
			}
			return nil
		},
	}},
}

// grpcSystem is a gRPC server-streaming call over one client connection.
type grpcSystem struct {
	srv *grpc.Server
	cc  *grpc.ClientConn
	wg  sync.WaitGroup
}

func startGRPC() (system, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &grpcSystem{srv: grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))}
	g.srv.RegisterService(&benchDesc, struct{}{})
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		_ = g.srv.Serve(ln)
	}()
	g.cc, err = grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		g.srv.Stop()
		g.wg.Wait()
		return nil, err
	}
	return g, nil
}

func (g *grpcSystem) name() string { return "grpc" }

func (g *grpcSystem) stream(ctx context.Context, req []byte) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := g.cc.NewStream(ctx, &benchDesc.Streams[0], "/switchyard.bench.v1.BenchService/Stream")
	if err != nil {
		return 0, err
	}
	if err := st.SendMsg(&req); err != nil {
		return 0, err
	}
	if err := st.CloseSend(); err != nil {
		return 0, err
	}
	n := 0
	var resp []byte
	for {
		if err := st.RecvMsg(&resp); err != nil {
			if err == io.EOF {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

func (g *grpcSystem) close() {
	g.cc.Close()
	g.srv.Stop()
	g.wg.Wait()
}
