package stack

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLogCause(t *testing.T) {
	tests := []struct {
		name, log, want string
	}{
		{"json error with err", `{"level":"INFO","msg":"frontend starting"}
{"level":"ERROR","msg":"exiting on error","err":"listen 0.0.0.0:8000: listen tcp 0.0.0.0:8000: bind: address already in use"}
`, "listen 0.0.0.0:8000: listen tcp 0.0.0.0:8000: bind: address already in use"},
		{"json error without err", `{"level":"ERROR","msg":"cannot start"}`, "cannot start"},
		{"text error", `time=x level=INFO msg=start
time=x level=ERROR msg="exiting on error" service=router err="listen on --grpc-addr :7003: address already in use"
`, "listen on --grpc-addr :7003: address already in use"},
		{"no error line: the last line", "router: invalid configuration: --router-mode \"x\"\n", `router: invalid configuration: --router-mode "x"`},
		{"the last error wins", `{"level":"ERROR","msg":"a","err":"first"}
{"level":"ERROR","msg":"b","err":"second"}`, "second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.log")
			if err := os.WriteFile(p, []byte(tt.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := LogCause(p); got != tt.want {
				t.Fatalf("LogCause = %q, want %q", got, tt.want)
			}
		})
	}
	if got := LogCause(filepath.Join(t.TempDir(), "none.log")); got == "" {
		t.Fatal("no cause for a missing log")
	}
}
