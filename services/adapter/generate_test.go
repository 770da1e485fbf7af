package adapter

import (
	"context"
	"flag"
	"strings"
	"testing"

	workerv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/worker/v1"
)

func relayAll(t *testing.T, sse string) ([]*workerv1.GenerateResponse, error) {
	t.Helper()
	var out []*workerv1.GenerateResponse
	err := relay(context.Background(), strings.NewReader(sse), 10, nil, func(r *workerv1.GenerateResponse) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func TestRelayTextOnlyFallback(t *testing.T) {
	out, err := relayAll(t, `data: {"choices":[{"text":"Hel","finish_reason":null}]}

: a comment line
data: {"choices":[{"text":"lo","finish_reason":"stop"}]}

data: [DONE]

`)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].GetText() != "Hel" || len(out[0].TokenIds) != 0 || out[0].FinishReason != workerv1.FinishReason_FINISH_REASON_UNSPECIFIED ||
		out[1].GetText() != "lo" || out[1].FinishReason != workerv1.FinishReason_FINISH_REASON_STOP || out[1].Usage.GetPromptTokens() != 10 {
		t.Fatalf("responses %v", out)
	}
}

func TestRelayEndings(t *testing.T) {
	// [DONE] without a finish reason ends as a stop.
	out, err := relayAll(t, "data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[5]}]}\n\ndata: [DONE]\n\n")
	if err != nil || len(out) != 2 || out[1].FinishReason != workerv1.FinishReason_FINISH_REASON_STOP || out[1].Usage.GetCompletionTokens() != 1 {
		t.Fatalf("responses %v, %v", out, err)
	}
	// A stream cut short is an error.
	if _, err := relayAll(t, "data: {\"choices\":[{\"text\":\"a\",\"token_ids\":[5]}]}\n\n"); err == nil {
		t.Fatal("a truncated stream was accepted")
	}
	// So is a chunk that is not JSON.
	if _, err := relayAll(t, "data: {oops\n\n"); err == nil {
		t.Fatal("a bad chunk was accepted")
	}
	// An aborted request is cancelled.
	out, err = relayAll(t, "data: {\"choices\":[{\"text\":\"\",\"token_ids\":[],\"finish_reason\":\"abort\"}]}\n\ndata: [DONE]\n\n")
	if err != nil || len(out) != 1 || out[0].FinishReason != workerv1.FinishReason_FINISH_REASON_CANCELLED {
		t.Fatalf("responses %v, %v", out, err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"no model", []string{"--tokenizer-dir", "/x"}, nil},
		{"no tokenizer", []string{"--model-name", "m"}, nil},
		{"zero block size", []string{"--model-name", "m", "--tokenizer-dir", "/x", "--block-size", "0"}, nil},
		{"bad engine url", []string{"--model-name", "m", "--tokenizer-dir", "/x", "--engine-url", "127.0.0.1:8001"}, nil},
		{"bad zmq endpoint", []string{"--model-name", "m", "--tokenizer-dir", "/x", "--kv-events-endpoint", "127.0.0.1:5557"}, nil},
		{"bad request plane", []string{"--model-name", "m", "--tokenizer-dir", "/x"}, map[string]string{"DYN_REQUEST_PLANE": "carrier-pigeon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var cfg Config
			fs := flag.NewFlagSet("adapter", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.Complete()
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatal("Complete and Validate accepted it")
			}
		})
	}
	var cfg Config
	fs := flag.NewFlagSet("adapter", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--model-name", "m", "--tokenizer-dir", "/x", "--engine-url", "http://engine:8001/v1"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Complete(); err != nil || cfg.MetricsURL != "http://engine:8001/metrics" {
		t.Fatalf("Complete: %v, metrics %q", err, cfg.MetricsURL)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}
