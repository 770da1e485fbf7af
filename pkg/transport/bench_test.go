package transport

import (
	"context"
	"io"
	"testing"
)

// benchPlane starts a server with the test handlers and a client for plane.
func benchPlane(b *testing.B, plane Plane) (Client, Server) {
	b.Helper()
	cfg := testConfig(b, plane)
	cfg.Limits.MaxMessageSize = DefaultMaxMessageSize
	return testClient(b, cfg), testServer(b, cfg, newTestHandlers())
}

func drainStream(b *testing.B, st Stream, want int) {
	n := 0
	for {
		_, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
	if n != want {
		b.Fatalf("got %d responses, want %d", n, want)
	}
}

// BenchmarkCallOneResponse measures a 1 KiB request answered once.
func BenchmarkCallOneResponse(b *testing.B) {
	for _, plane := range planes {
		b.Run(string(plane), func(b *testing.B) {
			c, s := benchPlane(b, plane)
			addr := s.Address("echo")
			payload := make([]byte, 1024)
			b.SetBytes(1024)
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.Call(context.Background(), addr, "echo", nil, payload)
				if err != nil {
					b.Fatal(err)
				}
				drainStream(b, st, 1)
			}
		})
	}
}

// BenchmarkStream100 measures one request answered by 100 responses of 64
// bytes, to the last one.
func BenchmarkStream100(b *testing.B) {
	for _, plane := range planes {
		b.Run(string(plane), func(b *testing.B) {
			c, s := benchPlane(b, plane)
			addr := s.Address("stream")
			req := encodeStreamReq(100, 64)
			b.ReportAllocs()
			for b.Loop() {
				st, err := c.Call(context.Background(), addr, "stream", nil, req)
				if err != nil {
					b.Fatal(err)
				}
				drainStream(b, st, 100)
			}
		})
	}
}

// BenchmarkFramesParallel measures streamed 64-byte frames with many
// concurrent calls; one op is one frame.
func BenchmarkFramesParallel(b *testing.B) {
	for _, plane := range planes {
		b.Run(string(plane), func(b *testing.B) {
			c, s := benchPlane(b, plane)
			addr := s.Address("stream")
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for {
					st, err := c.Call(context.Background(), addr, "stream", nil, encodeStreamReq(1000, 64))
					if err != nil {
						b.Error(err)
						return
					}
					for {
						_, err := st.Recv()
						if err == io.EOF {
							break
						}
						if err != nil {
							b.Error(err)
							return
						}
						if !pb.Next() {
							st.Close()
							return
						}
					}
				}
			})
		})
	}
}
