package flagenv

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantA   string
		wantD   time.Duration
		wantErr string
	}{
		{name: "defaults", wantA: ":7001", wantD: time.Second},
		{name: "generic env", env: map[string]string{"SY_GRPC_ADDR": ":9"}, wantA: ":9", wantD: time.Second},
		{name: "named env", env: map[string]string{"MY_DELAY": "3s"}, wantA: ":7001", wantD: 3 * time.Second},
		{name: "flag wins", args: []string{"--grpc-addr=:1"}, env: map[string]string{"SY_GRPC_ADDR": ":9"}, wantA: ":1", wantD: time.Second},
		{name: "invalid names variable", env: map[string]string{"MY_DELAY": "soon"}, wantErr: `invalid value "soon" for MY_DELAY (flag --delay)`},
		{name: "generic name not used for named flag", env: map[string]string{"SY_DELAY": "5s"}, wantA: ":7001", wantD: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			a := fs.String("grpc-addr", ":7001", "")
			d := fs.Duration("delay", time.Second, "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			err := setFrom(fs, "SY_", map[string]string{"delay": "MY_DELAY"}, lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *a != tt.wantA || *d != tt.wantD {
				t.Fatalf("got (%q, %v), want (%q, %v)", *a, *d, tt.wantA, tt.wantD)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("SWITCHYARD_REGISTRY_", "metrics-addr"); got != "SWITCHYARD_REGISTRY_METRICS_ADDR" {
		t.Fatalf("EnvName = %q", got)
	}
}

func TestPrintDefaultsNamesTheVariables(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("grpc-addr", ":7001", "gRPC listen `address`")
	fs.Duration("delay", 0, "a delay")
	fs.Bool("quiet", false, "say less")
	var out strings.Builder
	fs.SetOutput(&out)
	PrintDefaults(fs, "SY_", map[string]string{"delay": "MY_DELAY"})
	for _, want := range []string{
		"-grpc-addr address\n    \tgRPC listen address (default \":7001\") [$SY_GRPC_ADDR]\n",
		"-delay duration\n    \ta delay [$MY_DELAY]\n",
		"-quiet\n    \tsay less [$SY_QUIET]\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}
