package registry

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
	"github.com/switchyard-llm/switchyard/pkg/testwait"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig"
	"github.com/switchyard-llm/switchyard/pkg/tlsconfig/tlsconfigtest"
)

// secureEtcd starts an embedded etcd that serves https only, requires a
// client certificate signed by files.CA (--client-cert-auth) and has
// authentication on, with user "registry" (password "s3cret") as root.
func secureEtcd(t *testing.T, files tlsconfigtest.Files) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "secure", t.TempDir()
	curl, _ := url.Parse("https://127.0.0.1:0")
	purl, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs, cfg.UnsafeNoFsync = 10, 100, true
	cfg.BcryptCost = 4 // bcrypt's minimum: password checks at the default cost take seconds under -race
	cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = files.ServerCert, files.ServerKey
	cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = files.CA, true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready")
	}
	ep := "https://" + e.Clients[0].Addr().String()

	// Turn authentication on, as an operator would with etcdctl.
	tc, err := files.Client().ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "registry", "s3cret"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "registry", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enable etcd auth: %v", err)
		}
	}
	return ep
}

// TestEtcdTLSAndAuth points the registry at an etcd that requires client
// certificates and a user: with --etcd-ca, --etcd-cert, --etcd-key and the
// user it registers, lists and refreshes the lease; without the certificate,
// or with a wrong password, its calls fail. The member is given twice (as
// 127.0.0.1 and as localhost): the registry's keep-alive stream moves to a
// connection it dials to the member that leads.
func TestEtcdTLSAndAuth(t *testing.T) {
	t.Parallel()
	files, err := tlsconfigtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ep := secureEtcd(t, files)
	tests := []struct {
		name     string
		tls      tlsconfig.Config
		user     string
		password string
		ok       bool
	}{
		{name: "client certificate and user:password", tls: files.Client(), user: "registry:s3cret", ok: true},
		{name: "client certificate and --etcd-password", tls: files.Client(), user: "registry", password: "s3cret", ok: true},
		{name: "no client certificate", tls: tlsconfig.Config{CAFile: files.CA}, user: "registry:s3cret"},
		{name: "wrong password", tls: files.Client(), user: "registry:guess"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := fmt.Sprintf("ns%d", i)
			cfg := Config{Server: grpcserver.Config{GRPCAddr: "127.0.0.1:0", ShutdownTimeout: 2 * time.Second},
				Backend: BackendKVStore, EtcdEndpoints: ep + "," + strings.Replace(ep, "127.0.0.1", "localhost", 1), EtcdTLS: tt.tls, EtcdUser: tt.user, EtcdPassword: tt.password,
				EtcdDialTimeout: 2 * time.Second}
			if tt.ok {
				cfg.EtcdDialTimeout = 20 * time.Second // a loaded machine under -race needs a while for the TLS and auth handshakes
			}
			ctx, cancel := context.WithCancel(context.Background())
			svc, err := Start(ctx, cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				cancel()
				if tt.ok {
					t.Fatal(err)
				}
				return // refused at start: the wrong credentials never served
			}
			t.Cleanup(func() { cancel(); _ = svc.Wait() })
			cc, err := grpc.NewClient(svc.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			rpc := registryv1.NewRegistryServiceClient(cc)
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			in := &registryv1.Instance{Namespace: ns, Component: "c", Endpoint: "e", Transport: &commonv1.Transport{Tcp: "127.0.0.1:1"}}
			reg, err := rpc.Register(cctx, &registryv1.RegisterRequest{Instance: in, TtlSeconds: 30})
			if !tt.ok {
				if err == nil {
					t.Fatal("registered through an etcd that should have refused these credentials")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			list, err := rpc.ListInstances(cctx, &registryv1.ListInstancesRequest{Filter: &registryv1.InstanceFilter{Namespace: ns}})
			if err != nil || len(list.Instances) != 1 {
				t.Fatalf("ListInstances = %v, %v; want the one instance", list, err)
			}
			ka, err := rpc.KeepAlive(metadata.AppendToOutgoingContext(cctx, authtoken.LeaseTokenKey, reg.LeaseToken))
			if err != nil {
				t.Fatal(err)
			}
			defer ka.CloseSend()
			if err := ka.Send(&registryv1.KeepAliveRequest{LeaseId: reg.InstanceId}); err != nil {
				t.Fatal(err)
			}
			if r, err := ka.Recv(); err != nil || !r.Found || r.TtlSeconds <= 0 {
				t.Fatalf("keep-alive = %v, %v; want the lease found with its TTL", r, err)
			}
		})
	}
}

// TestKeepAliveOnTheLeaderWithTLSAndAuth checks that the connection the
// keepaliver dials to the leading member carries the etcd client's
// certificate and user: the member is given as two endpoints, the stream is
// placed on one of them, and a lease is refreshed on it.
func TestKeepAliveOnTheLeaderWithTLSAndAuth(t *testing.T) {
	t.Parallel()
	files, err := tlsconfigtest.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ep := secureEtcd(t, files)
	eps := []string{ep, strings.Replace(ep, "127.0.0.1", "localhost", 1)}
	tc, err := files.Client().ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, Username: "registry", Password: "s3cret", DialTimeout: 20 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	k := newKeepaliverChecking(cli, slog.New(slog.DiscardHandler), 20*time.Millisecond)
	defer k.close()
	testwait.Until(t, 30*time.Second, "the stream on a member's own connection", func() bool { at := k.endpoint(); return at == eps[0] || at == eps[1] })
	if ttl, found, err := k.once(ctx, uint64(lease.ID)); err != nil || !found || ttl <= 0 {
		t.Fatalf("refresh on the leader's connection: ttl %v, found %v, err %v", ttl, found, err)
	}
}
