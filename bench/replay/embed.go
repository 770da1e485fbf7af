package replay

import (
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed testdata/*.jsonl.gz
var traces embed.FS

// BuiltinTraces name the traces compiled in, for --trace: the Mooncake
// synthetic trace the project ships (3,993 requests; Apache-2.0, see
// testdata) and the two router-trace-gen made (see testdata/README.md).
var BuiltinTraces = map[string]string{
	"mooncake":  "testdata/mooncake_synthetic_trace.jsonl.gz",
	"low-reuse": "testdata/generated_low_reuse.jsonl.gz",
	"sessions":  "testdata/generated_sessions.jsonl.gz",
}

func builtinNames() string {
	var n []string
	for k := range BuiltinTraces {
		n = append(n, k)
	}
	slices.Sort(n)
	return strings.Join(n, ", ")
}

// BuiltinTrace returns a compiled-in trace by name (512-token blocks).
func BuiltinTrace(name string) ([]Request, error) {
	path, ok := BuiltinTraces[name]
	if !ok {
		return nil, fmt.Errorf("replay: no built-in trace %q: they are %s", name, builtinNames())
	}
	b, err := traces.ReadFile(path)
	if err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTrace, err)
	}
	defer gz.Close()
	return ParseTrace(gz, 512)
}

// SyntheticTrace returns the Mooncake synthetic trace the project ships.
func SyntheticTrace() ([]Request, error) { return BuiltinTrace("mooncake") }
