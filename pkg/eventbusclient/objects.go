package eventbusclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/apierr"
)

// chunkSize is the size of the chunks PutObject sends.
const chunkSize = 256 << 10

// PutObjectOptions describes an object to store.
type PutObjectOptions struct {
	// Description of the object.
	Description string
	// Metadata stored with the object.
	Metadata map[string]string
	// SHA256 is the data's expected sha256 in lowercase hex, when known in
	// advance; the server then refuses data that does not match.
	SHA256 string
}

// PutObject stores the data read from r as bucket/name, creating the bucket
// on first use. It hashes the data as it sends it and fails with DataLoss if
// the stored object's sha256 differs. It is not retried: r cannot be rewound.
func (c *Client) PutObject(ctx context.Context, bucket, name string, r io.Reader, opts PutObjectOptions) (*eventbusv1.ObjectInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.raw.PutObject(ctx)
	if err != nil {
		return nil, err
	}
	header := &eventbusv1.PutObjectHeader{Bucket: bucket, Name: name, Description: opts.Description, Metadata: opts.Metadata, Sha256: opts.SHA256}
	if err := stream.Send(&eventbusv1.PutObjectRequest{Part: &eventbusv1.PutObjectRequest_Header{Header: header}}); err != nil {
		_, rerr := stream.CloseAndRecv()
		return nil, rerr
	}
	h := sha256.New()
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			if err := stream.Send(&eventbusv1.PutObjectRequest{Part: &eventbusv1.PutObjectRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				// The server ended the call; CloseAndRecv says why.
				break
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("eventbus: read object %q: %w", name, rerr)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); resp.GetInfo().GetSha256() != sum {
		return nil, apierr.Errorf(codes.DataLoss, apierr.ReasonChecksumMismatch, "eventbus: object %q stored with sha256 %s, sent data has %s", name, resp.GetInfo().GetSha256(), sum)
	}
	return resp.GetInfo(), nil
}

// GetObject writes bucket/name to w and returns its info. It checks the data
// against the object's sha256 and fails with DataLoss when they differ (the
// server checks too); w may then hold corrupt data.
func (c *Client) GetObject(ctx context.Context, bucket, name string, w io.Writer) (*eventbusv1.ObjectInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.raw.GetObject(ctx, &eventbusv1.GetObjectRequest{Bucket: bucket, Name: name})
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	info := first.GetInfo()
	if info == nil {
		return nil, status.Errorf(codes.Internal, "eventbus: GetObject %q: first message carries no info", name)
	}
	h := sha256.New()
	var size uint64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return info, err
		}
		h.Write(resp.GetChunk())
		size += uint64(len(resp.GetChunk()))
		if _, err := w.Write(resp.GetChunk()); err != nil {
			return info, fmt.Errorf("eventbus: write object %q: %w", name, err)
		}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != info.GetSha256() || size != info.GetSize() {
		return info, apierr.Errorf(codes.DataLoss, apierr.ReasonChecksumMismatch, "eventbus: object %q: received %d bytes with sha256 %s, want %d bytes with %s", name, size, sum, info.GetSize(), info.GetSha256())
	}
	return info, nil
}

// ListObjects lists a bucket's objects.
func (c *Client) ListObjects(ctx context.Context, bucket string) ([]*eventbusv1.ObjectInfo, error) {
	var resp *eventbusv1.ListObjectsResponse
	err := c.retry(ctx, "list objects", func() error {
		var err error
		resp, err = c.raw.ListObjects(ctx, &eventbusv1.ListObjectsRequest{Bucket: bucket})
		return err
	})
	return resp.GetObjects(), err
}

// DeleteObject deletes an object.
func (c *Client) DeleteObject(ctx context.Context, bucket, name string) error {
	return c.retry(ctx, "delete object", func() error {
		_, err := c.raw.DeleteObject(ctx, &eventbusv1.DeleteObjectRequest{Bucket: bucket, Name: name})
		return err
	})
}
