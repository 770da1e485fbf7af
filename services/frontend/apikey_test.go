package frontend

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
)

// TestHashedAPIKeys: a key file may list keys in clear or as their SHA-256;
// both are accepted, the digest itself is not a key.
func TestHashedAPIKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte("# keys\nclear-key\n"+authtoken.Hash("hashed-key")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{APIKeyFile: p}
	keys, err := c.readKeys()
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{cfg: Config{keys: keys}}
	for key, want := range map[string]bool{"clear-key": true, "hashed-key": true, authtoken.Hash("hashed-key"): false, "other": false, "": false} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		if got := s.authorized(r); got != want {
			t.Errorf("key %q: authorized %v, want %v", key, got, want)
		}
	}
	if err := os.WriteFile(p, []byte("sha256:abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readKeys(); err == nil {
		t.Fatal("a malformed digest line was accepted")
	}
}
