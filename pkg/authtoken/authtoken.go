// Package authtoken holds Switchyard's bearer tokens: the token file a
// server reads (--auth-token-file, one "role token-or-sha256
// [namespace=NS,...]" per line), the roles and namespaces a token grants, and the per-RPC credentials a client sends (from
// --auth-token, SWITCHYARD_AUTH_TOKEN or --client-auth-token-file).
//
// A token in a file may be written in clear or as "sha256:" followed by the
// 64 hex digits of its SHA-256, so that the file on a server's disk does not
// hold the secret itself. Presented tokens are hashed and compared with every
// entry in constant time. The "sha256:" prefix is needed because
// `openssl rand -hex 32` makes clear tokens that look like a bare digest.
package authtoken

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Role is what a token may do. The server's per-RPC table lists the roles
// each RPC allows; admin may call everything.
type Role string

// The roles of the token file.
const (
	// RoleWorker registers, keeps its lease alive and publishes events.
	RoleWorker Role = "worker"
	// RoleRouter reads the registry, subscribes to events and routes.
	RoleRouter Role = "router"
	// RoleFrontend reads the registry, subscribes and asks the router.
	RoleFrontend Role = "frontend"
	// RoleAdmin may call every RPC.
	RoleAdmin Role = "admin"
)

// Roles are the valid roles, in the order the docs list them.
var Roles = []Role{RoleWorker, RoleRouter, RoleFrontend, RoleAdmin}

// ParseRole checks a role name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q: valid roles are worker, router, frontend, admin", s)
}

// HashPrefix marks a token written as its SHA-256 digest.
const HashPrefix = "sha256:"

// Hash returns the form of token to write in a token or key file:
// "sha256:" and the hex digest.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// Digest turns one entry of a token or key file into the SHA-256 of the
// token: the entry's own digest when it is written "sha256:<hex>", else the
// digest of the clear token.
func Digest(entry string) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	if h, ok := strings.CutPrefix(entry, HashPrefix); ok {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return d, fmt.Errorf("%q is not %s followed by 64 hex digits", entry, HashPrefix)
		}
		copy(d[:], b)
		return d, nil
	}
	if entry == "" {
		return d, errors.New("empty token")
	}
	return sha256.Sum256([]byte(entry)), nil
}

// Matcher checks presented secrets against a list of digests in constant
// time: every entry is compared, whichever matches.
type Matcher[T any] struct {
	entries []matcherEntry[T]
}

type matcherEntry[T any] struct {
	digest [sha256.Size]byte
	value  T
}

// Add adds a digest with the value a match returns.
func (m *Matcher[T]) Add(digest [sha256.Size]byte, v T) {
	m.entries = append(m.entries, matcherEntry[T]{digest, v})
}

// Len is the number of entries.
func (m *Matcher[T]) Len() int { return len(m.entries) }

// Match returns the values of every entry whose digest is the presented
// secret's. It compares against all entries so that the time taken does not
// tell which entry (if any) matched.
func (m *Matcher[T]) Match(secret string) []T {
	if secret == "" {
		return nil
	}
	d := sha256.Sum256([]byte(secret))
	var out []T
	for _, e := range m.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			out = append(out, e.value)
		}
	}
	return out
}

// Grant is what one line of a token file grants: a role, and the namespaces
// it is limited to (none: every namespace).
type Grant struct {
	Role Role
	// Namespaces, when not empty, are the only namespaces in which the
	// token may register instances and models and publish events.
	Namespaces []string
}

// Set is a parsed token file: the tokens a server accepts and their roles.
type Set struct {
	m Matcher[Grant]
}

// Len is the number of tokens.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.m.Len()
}

// Roles returns the roles of a presented token (a token may appear on
// several lines with different roles); none means the token is unknown.
func (s *Set) Roles(token string) []Role {
	var out []Role
	for _, g := range s.Grants(token) {
		out = append(out, g.Role)
	}
	return out
}

// Grants returns the grants of a presented token, one per line it is on;
// none means the token is unknown.
func (s *Set) Grants(token string) []Grant {
	if s == nil {
		return nil
	}
	return s.m.Match(token)
}

// namespacePrefix starts the optional third field of a token file line.
const namespacePrefix = "namespace="

// validNamespace is the registry's name rule (^[a-z0-9][a-z0-9_-]*$).
func validNamespace(ns string) bool {
	if ns == "" {
		return false
	}
	for i, c := range ns {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}

// parseNamespaces reads "namespace=a,b".
func parseNamespaces(field string) ([]string, error) {
	list, ok := strings.CutPrefix(field, namespacePrefix)
	if !ok {
		return nil, fmt.Errorf("the third field must be %sNS[,NS...]", namespacePrefix)
	}
	var out []string
	for _, ns := range strings.Split(list, ",") {
		if !validNamespace(ns) {
			return nil, fmt.Errorf("invalid namespace %q: names match ^[a-z0-9][a-z0-9_-]*$", ns)
		}
		out = append(out, ns)
	}
	return out, nil
}

// Parse reads a token file: one "role token-or-sha256 [namespace=NS,...]"
// per line, blank lines and lines starting with # skipped. The optional
// third field limits the token's registrations and publishes to those
// namespaces (workers of one team cannot register or publish in
// another's); admin is never limited. Errors name the line, never the
// token.
func Parse(r io.Reader) (*Set, error) {
	s := &Set{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 && len(fields) != 3 {
			return nil, fmt.Errorf("line %d: want \"role token [namespace=NS,...]\" (two or three fields), got %d fields", n, len(fields))
		}
		role, err := ParseRole(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		d, err := Digest(fields[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: the token is not valid: write it in clear or as %s and 64 hex digits", n, HashPrefix)
		}
		g := Grant{Role: role}
		if len(fields) == 3 {
			if role == RoleAdmin {
				return nil, fmt.Errorf("line %d: an admin token is not limited to namespaces; use another role", n)
			}
			if g.Namespaces, err = parseNamespaces(fields[2]); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
		}
		s.m.Add(d, g)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if s.Len() == 0 {
		return nil, errors.New("no token in the file")
	}
	return s, nil
}

// Load reads a token file from disk.
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return s, nil
}

// LeaseTokenKey is the gRPC metadata key of a registry lease's secret token,
// which KeepAlive, Register, Deregister and RegisterModel on that lease need.
const LeaseTokenKey = "switchyard-lease-token"

// NewLeaseToken returns a fresh random lease token (256 bits, URL-safe
// base64 without padding).
func NewLeaseToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lease token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DigestHex is the hex SHA-256 of a token, the form the registry stores.
func DigestHex(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// MatchDigestHex reports whether any of tokens has the hex SHA-256 digest,
// comparing every candidate in constant time.
func MatchDigestHex(digest string, tokens []string) bool {
	want, err := hex.DecodeString(digest)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	ok := 0
	for _, t := range tokens {
		sum := sha256.Sum256([]byte(t))
		ok |= subtle.ConstantTimeCompare(sum[:], want)
	}
	return ok == 1
}
