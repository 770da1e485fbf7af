package conformance_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/apierr"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/transport"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// Arguments of the wire functions each worker is asked to apply.
const (
	wireNamespace, wireComponent = "ns", "backend"
	wireInstance, wireRank       = 0xabc123, 2
	wireFirstEvent               = 7
	wireModel, wireFile          = "Qwen/Qwen3 0.6B", "tokenizer.json"
)

// goWire is each wire convention as Switchyard's Go side spells it: pkg/wire,
// pkg/transport, pkg/authtoken and pkg/apierr.
func goWire() map[string]string {
	return map[string]string{
		"kv_events_name":    wire.KVEventsName,
		"load_name":         wire.LoadName,
		"tokenizer_bucket":  wire.TokenizerBucket,
		"type_header":       wire.HeaderType,
		"lease_token_key":   authtoken.LeaseTokenKey,
		"lease_not_found":   apierr.ReasonLeaseNotFound,
		"content_type":      transport.HTTPContentType,
		"header_prefix":     strings.ToLower(transport.HTTPHeaderPrefix), // HTTP headers are case-insensitive
		"standard_headers":  strings.Join([]string{transport.HeaderTraceParent, transport.HeaderTraceState, transport.HeaderRequestID}, ","),
		"kv_events_subject": wire.KVEventsSubject(wireNamespace, wireComponent),
		"load_subject":      wire.LoadSubject(wireNamespace, wireComponent),
		"kv_events_msg_id":  wire.KVEventsMsgID(wireInstance, wireRank, wireFirstEvent),
		"tokenizer_object":  wire.TokenizerObject(wireModel, wireFile),
	}
}

// TestWireStringsMatch checks that the Python and Node workers, which keep
// their own copies of the wire conventions (subjects, msg ids, header and
// metadata names, object names), spell every one as pkg/wire and its
// neighbours do: each worker's own constants and functions are read by
// running its language on its modules, and compared with the Go values.
func TestWireStringsMatch(t *testing.T) {
	args := fmt.Sprintf("%q, %q, %d, %d, %d, %q, %q", wireNamespace, wireComponent, wireInstance, wireRank, wireFirstEvent, wireModel, wireFile)
	for _, tc := range []struct {
		name    string
		require func(t *testing.T)
		cmd     func() *exec.Cmd
		// missing are conventions the worker has no use for.
		missing map[string]string
	}{
		{"python", func(t *testing.T) {
			pythonWorker().Require(t)
		}, func() *exec.Cmd {
			cmd := exec.Command("/usr/bin/python3", "-c", `
import json, sys, worker, requestplane
ns, comp, inst, rank, first, model, file = `+args+`
json.dump({
    "kv_events_name": worker.KV_EVENTS_NAME,
    "load_name": worker.LOAD_NAME,
    "tokenizer_bucket": worker.TOKENIZER_BUCKET,
    "type_header": worker.TYPE_HEADER,
    "lease_token_key": worker.LEASE_TOKEN_KEY,
    "lease_not_found": worker.LEASE_NOT_FOUND,
    "content_type": requestplane.CONTENT_TYPE,
    "header_prefix": requestplane.HEADER_PREFIX.lower(),
    "standard_headers": ",".join(requestplane.STANDARD_HEADERS),
    "kv_events_subject": worker.subject(ns, comp, worker.KV_EVENTS_NAME),
    "load_subject": worker.subject(ns, comp, worker.LOAD_NAME),
    "kv_events_msg_id": worker.kv_events_msg_id(inst, rank, first),
    "tokenizer_object": worker.tokenizer_object(model, file),
}, sys.stdout)
`)
			cmd.Dir = filepath.Join("..", "python-worker")
			return cmd
		}, nil},
		{"node", func(t *testing.T) {
			nodeWorker().Require(t)
		}, func() *exec.Cmd {
			cmd := exec.Command("node", "--import", "tsx", "--input-type=module", "-e", `
const w = await import("./src/worker.ts");
const rp = await import("./src/requestplane.ts");
const lease = await import("./src/lease.ts");
const [ns, comp, inst, rank, first, model, file] = [`+args+`];
process.stdout.write(JSON.stringify({
  kv_events_name: w.KV_EVENTS_NAME,
  load_name: w.LOAD_NAME,
  tokenizer_bucket: w.TOKENIZER_BUCKET,
  type_header: w.TYPE_HEADER,
  lease_token_key: lease.LEASE_TOKEN_KEY,
  content_type: rp.CONTENT_TYPE,
  header_prefix: rp.HEADER_PREFIX.toLowerCase(),
  standard_headers: [...rp.STANDARD_HEADERS].join(","),
  kv_events_subject: w.subject(ns, comp, w.KV_EVENTS_NAME),
  load_subject: w.subject(ns, comp, w.LOAD_NAME),
  kv_events_msg_id: w.kvEventsMsgId(BigInt(inst), rank, BigInt(first)),
  tokenizer_object: w.objectName(model, file),
}));
`)
			cmd.Dir = filepath.Join("..", "node-worker")
			return cmd
		}, map[string]string{"lease_not_found": "it ends a lease only when KeepAlive answers found=false, never on an error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.require(t)
			cmd := tc.cmd()
			cmd.Env = os.Environ()
			cmd.Stderr = &strings.Builder{}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, cmd.Stderr)
			}
			var got map[string]string
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("the %s worker's conventions %q: %v", tc.name, out, err)
			}
			for k, want := range goWire() {
				if why, ok := tc.missing[k]; ok {
					t.Logf("%s: not used (%s)", k, why)
					continue
				}
				if g, ok := got[k]; !ok {
					t.Errorf("%s: the %s worker does not say", k, tc.name)
				} else if g != want {
					t.Errorf("%s: the %s worker has %q; pkg/wire and the Go side have %q", k, tc.name, g, want)
				}
			}
		})
	}
}
