package frontend

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	keys.start()
	s := &Service{keys: keys, keyMetrics: newKeyMetrics()}
	for key, want := range map[string]string{"clear-key": "key-1", "hashed-key": "key-2", authtoken.Hash("hashed-key"): "", "other": "", "": ""} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		k, err := s.authenticate(r)
		switch {
		case want == "" && !errors.Is(err, ErrUnauthorized):
			t.Errorf("key %q: authenticate = %v, want ErrUnauthorized", key, err)
		case want != "" && (err != nil || k.name != want):
			t.Errorf("key %q: authenticate = %v, %v, want key %s", key, k, err, want)
		}
	}
	if err := os.WriteFile(p, []byte("sha256:abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readKeys(); err == nil {
		t.Fatal("a malformed digest line was accepted")
	}
}

// TestKeyFileFields: names and per-key limits, the flags' defaults, and
// errors that never quote a key.
func TestKeyFileFields(t *testing.T) {
	type want struct {
		name     string
		rpm, tpm int
	}
	tests := []struct {
		name    string
		file    string
		want    []want
		wantErr string
	}{
		{name: "defaults", file: "k1\nk2\n", want: []want{{"key-1", 5, 100}, {"key-2", 5, 100}}},
		{name: "fields", file: "k1 name=alice rpm=60\n" + authtoken.Hash("k2") + " tpm=0 name=bob\n# c\n\nk3\n",
			want: []want{{"alice", 60, 100}, {"bob", 5, 0}, {"key-3", 5, 100}}},
		{name: "duplicate name", file: "k1 name=a\nk2 name=a\n", wantErr: "used twice"},
		{name: "bad name", file: "secret-key name=has/slash\n", wantErr: "invalid name"},
		{name: "name is the key", file: "secret-key name=secret-key\n", wantErr: "must not be the key"},
		{name: "bad rpm", file: "secret-key rpm=-1\n", wantErr: "invalid rpm"},
		{name: "unknown field", file: "secret-key burst=3\n", wantErr: "unknown field"},
		{name: "not name=value", file: "secret-key other-secret\n", wantErr: "not name=value"},
		{name: "empty", file: "# nothing\n", wantErr: "holds no key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "keys")
			if err := os.WriteFile(p, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			c := Config{APIKeyFile: p, KeyRequestsPerMinute: 5, KeyTokensPerMinute: 100}
			ring, err := c.readKeys()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				for _, secret := range []string{"secret-key", "other-secret"} {
					if strings.Contains(err.Error(), secret) && !strings.Contains(tt.file, "name="+secret) {
						t.Fatalf("the error %q quotes a key", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, k := range ring.keys {
				got = append(got, want{k.name, k.rpm, k.tpm})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("keys = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("keys = %+v, want %+v", got, tt.want)
				}
			}
		})
	}
}

// TestTokenBucket drives a bucket on a fake clock: a minute's worth of
// burst, refill at the rate, the wait it reports, a request bigger than the
// bucket slowed but not refused forever, and overdraft by charge.
func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(60, t0) // one a second
	for i := range 60 {
		if ok, _ := b.take(t0, 1); !ok {
			t.Fatalf("take %d of a full bucket of 60 refused", i)
		}
	}
	ok, wait := b.take(t0, 1)
	if ok || wait != time.Second {
		t.Fatalf("take from an empty bucket = %v, wait %v; want refused, 1s", ok, wait)
	}
	if ok, _ := b.take(t0.Add(time.Second), 1); !ok {
		t.Fatal("a second later one token should have come back")
	}
	// 120 from a bucket of 60: waits for a full bucket, then overdraws.
	ok, wait = b.take(t0.Add(time.Second), 120)
	if ok || wait != time.Minute {
		t.Fatalf("take(120) from an empty bucket of 60 = %v, wait %v; want refused, 1m", ok, wait)
	}
	t1 := t0.Add(time.Second + time.Minute)
	if ok, _ := b.take(t1, 120); !ok {
		t.Fatal("take(120) from a full bucket of 60 refused")
	}
	if got := b.available(t1); got != -60 {
		t.Fatalf("after overdraft the bucket holds %v, want -60", got)
	}
	b.charge(t1, 30)
	if ok, wait := b.take(t1, 1); ok || wait != 91*time.Second {
		t.Fatalf("take after a charge = %v, wait %v; want refused, 91s", ok, wait)
	}
	unlimited := newTokenBucket(0, t0)
	for range 1000 {
		if ok, _ := unlimited.take(t0, 1<<20); !ok {
			t.Fatal("a bucket without a limit refused")
		}
	}
}
