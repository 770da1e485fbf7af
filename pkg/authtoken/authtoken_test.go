package authtoken

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		roles   map[string][]Role // token -> roles it grants
		wantErr string
	}{
		{
			name: "clear and hashed, comments, several roles per token",
			file: "# comment\nworker w1\n\nrouter " + Hash("r1") + "\nadmin r1\n",
			roles: map[string][]Role{
				"w1": {RoleWorker}, "r1": {RoleRouter, RoleAdmin}, "x": nil, Hash("r1"): nil, "": nil,
			},
		},
		{name: "unknown role", file: "root t\n", wantErr: "line 1: unknown role"},
		{name: "one field", file: "worker\n", wantErr: "line 1: want"},
		{name: "third field not namespace=", file: "\nworker a b\n", wantErr: "line 2: the third field must be namespace="},
		{name: "four fields", file: "worker a namespace=x y\n", wantErr: "line 1: want"},
		{name: "bad namespace", file: "worker a namespace=ok,Bad\n", wantErr: "line 1: invalid namespace \"Bad\""},
		{name: "admin scoped", file: "admin a namespace=x\n", wantErr: "line 1: an admin token is not limited"},
		{name: "bad digest", file: "worker sha256:abc\n", wantErr: "line 1: the token is not valid"},
		{name: "empty", file: "# nothing\n", wantErr: "no token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader(tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for tok, want := range tt.roles {
				if got := s.Roles(tok); !slices.Equal(got, want) {
					t.Errorf("Roles(%q) = %v, want %v", tok, got, want)
				}
			}
		})
	}
}

// TestParseNamespaces: the optional third field limits a line's grant to
// namespaces; other lines of the same token keep their own.
func TestParseNamespaces(t *testing.T) {
	s, err := Parse(strings.NewReader("worker w1 namespace=team-a,team_b\nworker w2\nrouter w1\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Grants("w1")
	if len(got) != 2 || got[0].Role != RoleWorker || strings.Join(got[0].Namespaces, ",") != "team-a,team_b" ||
		got[1].Role != RoleRouter || got[1].Namespaces != nil {
		t.Fatalf("grants of w1 = %+v", got)
	}
	if got := s.Grants("w2"); len(got) != 1 || got[0].Namespaces != nil {
		t.Fatalf("grants of w2 = %+v", got)
	}
}

func TestParseErrorsHideTokens(t *testing.T) {
	_, err := Parse(strings.NewReader("superuser topsecret\n"))
	if err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("error %v must not show the token", err)
	}
}

func TestClient(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	if err := os.WriteFile(p, []byte("# mounted secret\n\n  s3cret  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		c       Client
		want    string
		invalid bool
	}{
		{name: "none", c: Client{}},
		{name: "flag", c: Client{Token: " t1 "}, want: "t1"},
		{name: "file", c: Client{TokenFile: p}, want: "s3cret"},
		{name: "both", c: Client{Token: "a", TokenFile: p}, invalid: true},
		{name: "missing file", c: Client{TokenFile: filepath.Join(dir, "nope")}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Complete()
			if err == nil {
				err = tt.c.Validate()
			}
			if (err != nil) != tt.invalid {
				t.Fatalf("Complete+Validate = %v, invalid %v", err, tt.invalid)
			}
			if tt.invalid {
				return
			}
			creds, err := tt.c.Credentials()
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				if creds != nil {
					t.Fatal("credentials without a token")
				}
				return
			}
			md, _ := creds.GetRequestMetadata(t.Context())
			if md[MetadataKey] != "Bearer "+tt.want {
				t.Fatalf("metadata %v, want Bearer %s", md, tt.want)
			}
		})
	}
}

func TestFromHeader(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer ": "", "abc": ""} {
		got, ok := FromHeader(in)
		if got != want || ok != (want != "") {
			t.Errorf("FromHeader(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("worker a\nadmin sha256:" + strings.Repeat("0", 64) + "\n")
	f.Add("# c\nrouter x y\n")
	f.Fuzz(func(t *testing.T, file string) {
		s, err := Parse(strings.NewReader(file))
		if err != nil {
			return
		}
		if s.Len() == 0 {
			t.Fatal("a parsed set without tokens")
		}
		// A parsed token file never grants a role to the empty token.
		if len(s.Roles("")) != 0 {
			t.Fatal("the empty token has roles")
		}
	})
}
