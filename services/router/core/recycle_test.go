package core

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/router/v1"
	"github.com/switchyard-llm/switchyard/pkg/kvhash"
)

// TestRecycledResponses routes the same requests on two equal cores, one
// by RouteOwned and recycling every other response once it has compared
// it, the other by Route: each response
// filled again (with more, fewer or as many candidates as it had, as
// exclusions change the candidates) equals the fresh one, and a response
// kept (not recycled) is never changed by later decisions.
func TestRecycledResponses(t *testing.T) {
	const workers = 8
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	recycled, fresh := cluster(t, Config{Mode: ModeKV, Clock: clock}, workers), cluster(t, Config{Mode: ModeKV, Clock: clock}, workers)
	r := rand.New(rand.NewPCG(5, 6))
	type kept struct{ got, want *routerv1.RouteResponse }
	var keep []kept
	for i := range 400 {
		now = now.Add(time.Duration(r.IntN(20)) * time.Millisecond)
		req := &routerv1.RouteRequest{RequestId: strconv.Itoa(i), Target: modelTarget(), TokenIds: tokens(4*(1+r.IntN(12)), uint32(r.IntN(3)))}
		for w := range workers {
			if r.IntN(3) == 0 && len(req.ExcludeInstanceIds) < workers-1 {
				req.ExcludeInstanceIds = append(req.ExcludeInstanceIds, uint64(w+1))
			}
		}
		if i%3 == 0 {
			// Hashes, which RouteOwned keeps as they are and Route copies.
			for _, b := range kvhash.Hashes(req.TokenIds, 4, nil) {
				req.BlockHashes = append(req.BlockHashes, b.Sequence)
			}
			req.TokenIds = nil
		}
		got, err := recycled.RouteOwned(req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Route(proto.Clone(req).(*routerv1.RouteRequest))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("request %d: response %v, want %v", i, got, want)
		}
		if len(got.Candidates) != workers-len(req.ExcludeInstanceIds) {
			t.Fatalf("request %d: %d candidates with %d of %d workers excluded", i, len(got.Candidates), len(req.ExcludeInstanceIds), workers)
		}
		if i%2 == 0 {
			Recycle(got)
		} else {
			keep = append(keep, kept{got, want})
		}
		if i%5 == 0 {
			recycled.Free(req.RequestId)
			fresh.Free(req.RequestId)
		}
	}
	for i, k := range keep {
		if !proto.Equal(k.got, k.want) {
			t.Fatalf("kept response %d changed: %v, want %v", i, k.got, k.want)
		}
	}
}
