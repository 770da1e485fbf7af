package frontendbench_test

import (
	"context"
	"testing"

	"github.com/switchyard-llm/switchyard/bench/frontendbench"
	"github.com/switchyard-llm/switchyard/pkg/transport"
)

// BenchmarkStream times one streamed 16-token generation per op, sent
// directly to the mocker and through the frontend (admission control on,
// as by default, and off), on each request plane.
func BenchmarkStream(b *testing.B) {
	for _, plane := range []transport.Plane{transport.PlaneTCP, transport.PlaneHTTP, transport.PlaneNATS} {
		env, err := frontendbench.Start(plane)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range []struct {
			name string
			fn   func(context.Context, int) (frontendbench.Timing, error)
		}{{"direct", env.Direct}, {"frontend", env.Frontend}, {"frontend-admission-off", env.FrontendNoAdmission}} {
			b.Run(string(plane)+"/"+p.name, func(b *testing.B) {
				ctx := context.Background()
				for b.Loop() {
					if _, err := p.fn(ctx, 16); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		env.Close()
	}
}
