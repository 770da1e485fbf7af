package registry

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keepaliver refreshes leases on behalf of clients. Each refresh is a single
// keep-alive round trip to etcd, so a lease lives exactly as long as its
// client keeps asking, through whichever registry replica it reaches.
type keepaliver struct {
	cli *clientv3.Client
}

func newKeepaliver(cli *clientv3.Client) *keepaliver { return &keepaliver{cli: cli} }

func (k *keepaliver) once(ctx context.Context, lease uint64) (time.Duration, bool, error) {
	resp, err := k.cli.KeepAliveOnce(ctx, clientv3.LeaseID(lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, etcdErr("keep alive", err)
	}
	return time.Duration(resp.TTL) * time.Second, true, nil
}

func (k *keepaliver) close() {}
