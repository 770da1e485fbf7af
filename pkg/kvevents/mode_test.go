package kvevents

import (
	"flag"
	"strings"
	"testing"
)

func TestParseAndResolve(t *testing.T) {
	tests := []struct {
		args    []string
		want    Mode
		wantErr bool
	}{
		{nil, JetStream, false},
		{[]string{"--kv-events-mode", "core"}, Core, false},
		{[]string{"--kv-events-mode", " Direct "}, Direct, false},
		{[]string{"--kv-events-mode", "none"}, None, false},
		{[]string{"--no-kv-events"}, None, false},
		{[]string{"--no-router-kv-events"}, None, false},
		{[]string{"--kv-events-mode", "direct", "--no-router-kv-events"}, None, false},
		{[]string{"--kv-events-mode", "zmq"}, "", true},
		{[]string{"--kv-events-mode", "zmq", "--no-kv-events"}, "", true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var f Flags
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			f.RegisterFlags(fs, true)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.Resolve()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("Resolve() = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "jetstream, core, direct, none") {
				t.Fatalf("error %q does not name the valid values", err)
			}
		})
	}
	for m, published := range map[Mode]bool{JetStream: true, Core: true, Direct: false, None: false} {
		if m.Published() != published {
			t.Errorf("%s.Published() = %v", m, !published)
		}
	}
}
