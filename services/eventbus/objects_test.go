package eventbus_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-llm/switchyard/pkg/eventbusclient"
	"github.com/switchyard-llm/switchyard/services/eventbus/eventbustest"
)

func TestObjectStore(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ns, svc := eventbustest.Start(t)
	c := eventbustest.Client(t, svc.Addr().String())
	size := 50 << 20
	if testing.Short() {
		size = 4 << 20
	}
	blob := make([]byte, size)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blob)
	info, err := c.PutObject(ctx, "snapshots", "model/weights.bin", bytes.NewReader(blob), eventbusclient.PutObjectOptions{
		Description: "test blob", Metadata: map[string]string{"kind": "test"}, SHA256: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetSize() != uint64(size) || info.GetSha256() != hex.EncodeToString(sum[:]) {
		t.Fatalf("put info = size %d sha256 %s", info.GetSize(), info.GetSha256())
	}
	var out bytes.Buffer
	if _, err := c.GetObject(ctx, "snapshots", "model/weights.bin", &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatal("round-tripped object differs")
	}
	list, err := c.ListObjects(ctx, "snapshots")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].GetName() != "model/weights.bin" || list[0].GetMetadata()["kind"] != "test" {
		t.Errorf("list = %v", list)
	}

	// A put whose data does not match the sha256 it announces is refused.
	_, err = c.PutObject(ctx, "snapshots", "liar", strings.NewReader("data"), eventbusclient.PutObjectOptions{SHA256: strings.Repeat("0", 64)})
	if status.Code(err) != codes.DataLoss {
		t.Errorf("put with a wrong sha256: %v; want DataLoss", err)
	}

	// Corrupt one chunk behind the eventbus's back: the sha256 catches it.
	corruptObject(ctx, t, ns.ClientURL(), "snapshots", "model/weights.bin")
	out.Reset()
	_, err = c.GetObject(ctx, "snapshots", "model/weights.bin", &out)
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("get of a corrupt object: %v; want DataLoss naming sha256", err)
	}

	if err := c.DeleteObject(ctx, "snapshots", "model/weights.bin"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetObject(ctx, "snapshots", "model/weights.bin", &out)
	if status.Code(err) != codes.NotFound {
		t.Errorf("get after delete: %v; want NotFound", err)
	}
}

// directJetStream connects to NATS at url past the eventbus; the test's
// cleanup closes the connection.
func directJetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// corruptObject flips one byte of an object's first chunk directly in NATS.
func corruptObject(ctx context.Context, t *testing.T, url, bucket, name string) {
	t.Helper()
	js := directJetStream(t, url)
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	subject := fmt.Sprintf("$O.%s.C.%s", bucket, info.NUID)
	stream, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var chunks [][]byte
	for range info.Chunks {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, append([]byte(nil), m.Data()...))
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	chunks[0][0] ^= 0xff
	for _, ch := range chunks {
		if _, err := js.Publish(ctx, subject, ch); err != nil {
			t.Fatal(err)
		}
	}
}
