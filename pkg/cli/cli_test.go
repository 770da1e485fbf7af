package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"strings"
	"testing"
)

type testConfig struct {
	Port  int
	Level string
	File  string
}

func (c *testConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Port, "port", 7, "")
	fs.StringVar(&c.Level, "mode", "a", "")
	fs.StringVar(&c.File, "file", "", "")
}

// Complete reads --file, as services read their token and key files.
func (c *testConfig) Complete() error {
	if c.File == "" {
		return nil
	}
	_, err := os.ReadFile(c.File)
	return err
}

func (c *testConfig) Validate() error {
	if c.Level != "a" && c.Level != "b" {
		return errors.New(`invalid MODE "` + c.Level + `": valid values are a, b`)
	}
	return nil
}

func TestMain_ExitCodes(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		runErr  error
		want    int
		wantOut string
	}{
		{name: "clean run", want: 0},
		{name: "run fails", runErr: errors.New("boom"), want: 1, wantOut: "boom"},
		{name: "bad flag", args: []string{"--port=x"}, want: 2, wantOut: "invalid value"},
		{name: "bad env names the variable", env: map[string]string{"T_PORT": "seven"}, want: 2, wantOut: `invalid value "seven" for T_PORT`},
		{name: "invalid config", args: []string{"--mode=c"}, want: 2, wantOut: "valid values are a, b"},
		{name: "unreadable file", args: []string{"--file=/nonexistent/f"}, want: 2, wantOut: "invalid configuration: open /nonexistent/f"},
		{name: "named variable", env: map[string]string{"MODE": "z"}, want: 2, wantOut: `invalid MODE "z"`},
		{name: "bad log level", args: []string{"--log-level=loud"}, want: 2, wantOut: "invalid --log-level"},
		{name: "bad log format", args: []string{"--log-format=xml"}, want: 2, wantOut: "invalid --log-format"},
		{name: "text log format", args: []string{"--log-format=text"}, runErr: errors.New("boom"), want: 1, wantOut: `level=ERROR msg="exiting on error"`},
		{name: "json log off a terminal", runErr: errors.New("boom"), want: 1, wantOut: `"msg":"exiting on error"`},
		{name: "log format from the environment", env: map[string]string{"SWITCHYARD_LOG_FORMAT": "text"}, runErr: errors.New("boom"), want: 1, wantOut: "level=ERROR"},
		{name: "help names the variables", args: []string{"-h"}, want: 0, wantOut: "(default 7) [$T_PORT]"},
		{name: "help names the documented variable", args: []string{"-h"}, want: 0, wantOut: "[$MODE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			var cfg testConfig
			code := Main(Options{Name: "t", EnvPrefix: "T_", Env: map[string]string{"mode": "MODE"}}, &cfg, tt.args, &out,
				func(ctx context.Context, log *slog.Logger) error { return tt.runErr })
			if code != tt.want {
				t.Fatalf("exit code %d, want %d; output:\n%s", code, tt.want, out.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("output %q lacks %q", out.String(), tt.wantOut)
			}
		})
	}
}
