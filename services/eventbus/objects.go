package eventbus

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
)

// objectChunk is the size of the chunks GetObject sends.
const objectChunk = 256 << 10

// objects is the object store over JetStream object store buckets, which
// keep each object's SHA-256 digest in its metadata and check it on read.
type objects struct {
	js jetstream.JetStream
}

// bucket opens a bucket, creating it when create is set.
func (o *objects) bucket(ctx context.Context, name string, create bool) (jetstream.ObjectStore, error) {
	obs, err := o.js.ObjectStore(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if !create {
			return nil, fmt.Errorf("%w: bucket %q does not exist", ErrNotFound, name)
		}
		obs, err = o.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      name,
			Description: "Switchyard objects",
			Storage:     jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = o.js.ObjectStore(ctx, name)
		}
	}
	if err != nil {
		return nil, natsErr("object store "+name, err)
	}
	return obs, nil
}

// validatePutHeader checks a PutObject header before any I/O.
func validatePutHeader(h *eventbusv1.PutObjectHeader) error {
	if h == nil {
		return invalidf("the first PutObject message must carry the header")
	}
	if err := checkName("bucket", h.GetBucket()); err != nil {
		return err
	}
	if err := checkObjectName(h.GetName()); err != nil {
		return err
	}
	if s := h.GetSha256(); s != "" {
		if b, err := hex.DecodeString(s); err != nil || len(b) != 32 || strings.ToLower(s) != s {
			return invalidf("sha256 %q is not 64 lowercase hex digits", s)
		}
	}
	return nil
}

// put stores an object read from r under a validated header.
func (o *objects) put(ctx context.Context, h *eventbusv1.PutObjectHeader, r io.Reader) (*eventbusv1.ObjectInfo, error) {
	obs, err := o.bucket(ctx, h.GetBucket(), true)
	if err != nil {
		return nil, err
	}
	info, err := obs.Put(ctx, jetstream.ObjectMeta{
		Name:        h.GetName(),
		Description: h.GetDescription(),
		Metadata:    h.GetMetadata(),
	}, r)
	if err != nil {
		if errors.Is(err, ErrInvalid) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, natsErr("put object "+h.GetName(), err)
	}
	out := objectInfo(info)
	if want := h.GetSha256(); want != "" && want != out.GetSha256() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = obs.Delete(dctx, h.GetName())
		return nil, fmt.Errorf("%w: object %q: received data has sha256 %s, the header says %s; not kept", ErrDataLoss, h.GetName(), out.GetSha256(), want)
	}
	return out, nil
}

// get streams an object: info first, then its data in chunks. A digest
// mismatch found at the end is ErrDataLoss.
func (o *objects) get(ctx context.Context, bucket, name string, sendInfo func(*eventbusv1.ObjectInfo) error, sendChunk func([]byte) error) error {
	obs, err := o.bucket(ctx, bucket, false)
	if err != nil {
		return err
	}
	res, err := obs.Get(ctx, name)
	if err != nil {
		return natsErr(fmt.Sprintf("get object %q", name), err)
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return natsErr(fmt.Sprintf("get object %q", name), err)
	}
	if err := sendInfo(objectInfo(info)); err != nil {
		return err
	}
	buf := make([]byte, objectChunk)
	for {
		n, rerr := io.ReadFull(res, buf)
		if n > 0 {
			if err := sendChunk(buf[:n]); err != nil {
				return err
			}
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrUnexpectedEOF):
			return nil
		case errors.Is(rerr, jetstream.ErrDigestMismatch):
			return fmt.Errorf("%w: object %q in bucket %q does not match its sha256 %s: the stored data is corrupt", ErrDataLoss, name, bucket, objectInfo(info).GetSha256())
		default:
			return natsErr(fmt.Sprintf("read object %q", name), rerr)
		}
	}
}

// list lists a bucket's objects.
func (o *objects) list(ctx context.Context, bucket string) ([]*eventbusv1.ObjectInfo, error) {
	obs, err := o.bucket(ctx, bucket, false)
	if err != nil {
		return nil, err
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, natsErr("list objects", err)
	}
	out := make([]*eventbusv1.ObjectInfo, 0, len(infos))
	for _, info := range infos {
		out = append(out, objectInfo(info))
	}
	return out, nil
}

// remove deletes an object.
func (o *objects) remove(ctx context.Context, bucket, name string) error {
	obs, err := o.bucket(ctx, bucket, false)
	if err != nil {
		return err
	}
	if err := obs.Delete(ctx, name); err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("%w: object %q does not exist in bucket %q", ErrNotFound, name, bucket)
		}
		return natsErr("delete object", err)
	}
	return nil
}

// objectInfo converts JetStream object info; the digest "SHA-256=<base64url>"
// becomes lowercase hex.
func objectInfo(info *jetstream.ObjectInfo) *eventbusv1.ObjectInfo {
	out := &eventbusv1.ObjectInfo{
		Bucket:      info.Bucket,
		Name:        info.Name,
		Description: info.Description,
		Size:        info.Size,
		Metadata:    info.Metadata,
	}
	if d, ok := strings.CutPrefix(info.Digest, "SHA-256="); ok {
		if raw, err := base64.URLEncoding.DecodeString(d); err == nil {
			out.Sha256 = hex.EncodeToString(raw)
		}
	}
	if !info.ModTime.IsZero() {
		out.Modified = timestamppb.New(info.ModTime)
	}
	return out
}
