package frontend_test

import (
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// TestMixedFleet: one frontend serves workers on the tcp, http and nats
// planes at once, each dialled with the plane it registered, whatever the
// frontend's own DYN_REQUEST_PLANE. Every chat is answered. (-short runs
// the frontend on one plane; the full form on each.) A fourth worker serves
// tcp and http at once and registers both addresses.
func TestMixedFleet(t *testing.T) {
	t.Parallel()
	planes := []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP, transport.PlaneNATS}
	owns := planes
	if testing.Short() {
		owns = owns[1:2] // http: the way round that failed with tcp workers
	}
	for _, own := range owns {
		t.Run("frontend on "+string(own), func(t *testing.T) {
			ctx := testCtx(t)
			s := startStack(t, stackOpts{plane: own, mode: "round-robin"})
			for _, p := range planes {
				s.addMockerOn(p, 0)
			}
			// And one worker on two planes (DYN_REQUEST_PLANE=tcp,http),
			// which registers both addresses.
			both := s.addMockerOnPlanes([]transport.Plane{transport.PlaneTCP, transport.PlaneHTTP}, 0)
			if got := transport.AddressesOf(both.w.Instance().GetTransport()); len(got) != 2 || got[0].Kind != transport.PlaneTCP || got[1].Kind != transport.PlaneHTTP {
				t.Fatalf("a tcp,http worker registered %v; want its tcp and http addresses", got)
			}
			s.waitInstances(len(planes) + 1)
			const chats = 50
			var wg sync.WaitGroup
			errs := make(chan error, chats)
			for i := range chats {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := s.client.Chat.Completions.New(ctx, chatParams("Hello from a mixed fleet", int64(4+i%4)))
					if err == nil && (len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "") {
						t.Errorf("chat %d = %+v", i, resp)
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			failed := 0
			for err := range errs {
				if err != nil {
					failed++
					t.Log(err)
				}
			}
			if failed > 0 {
				t.Fatalf("%d of %d chats failed", failed, chats)
			}
		})
	}
}
