package replay

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
)

//go:embed testdata/mooncake_synthetic_trace.jsonl.gz
var syntheticTrace []byte

// SyntheticTrace returns the Mooncake synthetic trace the project ships
// (3,993 requests, 512-token blocks; Apache-2.0, see testdata).
func SyntheticTrace() ([]Request, error) {
	gz, err := gzip.NewReader(bytes.NewReader(syntheticTrace))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadTrace, err)
	}
	defer gz.Close()
	return ParseTrace(gz, 512)
}
