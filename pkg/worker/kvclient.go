package worker

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
	"github.com/switchyard-llm/switchyard/pkg/grpcclient"
)

// DialAPI connects to a worker's WorkerService at addr (its instance's
// wire.MetadataWorkerAPI), without waiting for the connection.
func DialAPI(addr string, opts grpcclient.Options) (*grpc.ClientConn, workerv1.WorkerServiceClient, error) {
	cc, err := grpcclient.Dial("worker", []string{addr}, opts,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, nil, err
	}
	return cc, workerv1.NewWorkerServiceClient(cc), nil
}

// ReadKVState reads a worker's whole GetKvState: every rank's blocks with
// the event id they are current to, and the instance that answered.
func ReadKVState(ctx context.Context, c workerv1.WorkerServiceClient, opts ...grpc.CallOption) (instance uint64, ranks []RankState, err error) {
	st, err := c.GetKvState(ctx, &workerv1.GetKvStateRequest{}, opts...)
	if err != nil {
		return 0, nil, err
	}
	at := map[uint32]int{}
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return instance, ranks, nil
		}
		if err != nil {
			return 0, nil, err
		}
		instance = r.GetInstanceId()
		i, ok := at[r.GetDpRank()]
		if !ok {
			i = len(ranks)
			at[r.GetDpRank()] = i
			ranks = append(ranks, RankState{DPRank: r.GetDpRank(), EventID: r.GetEventId()})
		}
		rs := &ranks[i]
		if m := r.GetMedia(); len(m) > 0 || rs.Media != nil {
			// A message without media has its blocks on GPU.
			for len(rs.Media) < len(rs.Hashes) {
				rs.Media = append(rs.Media, workerv1.KvMedium_KV_MEDIUM_GPU)
			}
			rs.Media = append(rs.Media, m...)
			for len(rs.Media) < len(rs.Hashes)+len(r.GetSequenceHashes()) {
				rs.Media = append(rs.Media, workerv1.KvMedium_KV_MEDIUM_GPU)
			}
		}
		rs.Hashes = append(rs.Hashes, r.GetSequenceHashes()...)
		if len(rs.Media) > len(rs.Hashes) {
			rs.Media = rs.Media[:len(rs.Hashes)]
		}
	}
}
