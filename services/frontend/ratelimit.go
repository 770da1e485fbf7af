package frontend

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/pkg/authtoken"
)

// ErrRateLimited is an API key over its requests or tokens per minute
// (429 with Retry-After).
var ErrRateLimited = errors.New("rate limit reached")

// Limit kinds: the label values of the rate-limit metrics and the names in
// the 429 message.
const (
	limitRequests = "requests"
	limitTokens   = "tokens"
)

// rateLimitError is a request refused by a key's bucket; wait is how long
// until the bucket holds what the request needs.
type rateLimitError struct {
	limit string // limitRequests or limitTokens
	per   int    // the key's limit per minute
	need  int    // what this request needs from the bucket
	wait  time.Duration
}

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("%v: this API key may use %d %s per minute; this request needs %d; retry in %s",
		ErrRateLimited, e.per, e.limit, e.need, e.wait.Round(time.Millisecond))
}

func (e *rateLimitError) Unwrap() error { return ErrRateLimited }

// retryAfter is the Retry-After value: whole seconds, rounded up, at least 1.
func (e *rateLimitError) retryAfter() string {
	return strconv.FormatInt(max(1, int64(math.Ceil(e.wait.Seconds()))), 10)
}

// tokenBucket is a token bucket holding up to perMinute tokens, refilled
// continuously at perMinute per minute; perMinute 0 means no limit. Its
// level may go below zero: the completion tokens of a request are only known
// at its end and are charged then, so a key that overdraws waits longer.
type tokenBucket struct {
	mu        sync.Mutex
	perMinute float64
	level     float64
	at        time.Time
}

func newTokenBucket(perMinute int, now time.Time) *tokenBucket {
	return &tokenBucket{perMinute: float64(perMinute), level: float64(perMinute), at: now}
}

// refill adds what accrued since the last call; b.mu is held.
func (b *tokenBucket) refill(now time.Time) {
	if now.After(b.at) {
		b.level = min(b.perMinute, b.level+now.Sub(b.at).Minutes()*b.perMinute)
		b.at = now
	}
}

// take removes n tokens when the bucket holds them, else it reports how long
// until it will. A request bigger than the whole bucket is let through once
// the bucket is full (and overdraws it), so that it is slowed, never refused
// forever.
func (b *tokenBucket) take(now time.Time, n int) (ok bool, wait time.Duration) {
	if b == nil || b.perMinute == 0 {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	need := min(float64(n), b.perMinute)
	if b.level >= need {
		b.level -= float64(n)
		return true, 0
	}
	return false, time.Duration((need - b.level) / b.perMinute * float64(time.Minute))
}

// charge removes n tokens whether or not the bucket holds them.
func (b *tokenBucket) charge(now time.Time, n int) {
	if b == nil || b.perMinute == 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level -= float64(n)
}

// available is the bucket's level now.
func (b *tokenBucket) available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.level
}

// apiKey is one accepted API key: the SHA-256 of the key (never the key),
// the name it is known by in metrics and logs, and its limits.
type apiKey struct {
	digest [sha256.Size]byte
	name   string
	// rpm and tpm are the key's requests and tokens (prompt plus
	// completion) per minute; 0 is no limit.
	rpm, tpm int
	// requests and tokens are their buckets, made by keyring.start.
	requests, tokens *tokenBucket
	// priority is its requests' admission band unless they send
	// x-switchyard-priority (admission.go); 0 by default.
	priority int32
}

// keyring is the frontend's API keys, in file order.
type keyring struct {
	keys []*apiKey
	now  func() time.Time
}

// keyNameRE is what a key's name may be: short and plain, so that it is a
// safe, bounded metrics label.
var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// readKeys collects --api-key and the lines of --api-key-file into a
// keyring (nil when there are none: no authentication). Blank lines and
// lines starting with # are skipped. A line is the key, in clear or as its
// digest "sha256:" and 64 hex digits (authtoken.Hash) so that the file on
// disk does not hold the key, then optional fields name=NAME (the key's name
// in metrics and the access log; default key-N, N its position among the
// keys), rpm=N and tpm=N (its requests and tokens per minute; default
// --key-requests-per-minute and --key-tokens-per-minute, 0 no limit) and
// priority=N (its requests' admission band when they send no
// x-switchyard-priority; default 0, negative: sheddable).
func (c *Config) readKeys() (*keyring, error) {
	ring := &keyring{now: time.Now}
	if c.RateLimitClock != nil {
		ring.now = c.RateLimitClock
	}
	seen := map[string]bool{}
	add := func(where string, k *apiKey) error {
		if seen[k.name] {
			return fmt.Errorf("%s: the key name %q is used twice", where, k.name)
		}
		seen[k.name] = true
		ring.keys = append(ring.keys, k)
		return nil
	}
	if k := strings.TrimSpace(c.APIKey); k != "" {
		if err := add("--api-key", &apiKey{digest: sha256.Sum256([]byte(k)), name: "api-key", rpm: c.KeyRequestsPerMinute, tpm: c.KeyTokensPerMinute}); err != nil {
			return nil, err
		}
	}
	if c.APIKeyFile != "" {
		f, err := os.Open(c.APIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--api-key-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		n, inFile := 0, 0
		for sc.Scan() {
			n++
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			inFile++
			where := fmt.Sprintf("--api-key-file %s line %d", c.APIKeyFile, n)
			k, err := c.parseKeyLine(line, len(ring.keys)+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err) // never the line: it may hold a key
			}
			if err := add(where, k); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--api-key-file: %w", err)
		}
		if inFile == 0 {
			return nil, fmt.Errorf("--api-key-file %s holds no key", c.APIKeyFile)
		}
	}
	if len(ring.keys) == 0 {
		return nil, nil
	}
	return ring, nil
}

// parseKeyLine parses one key line; ordinal names a key without name=.
// Its errors never quote the key.
func (c *Config) parseKeyLine(line string, ordinal int) (*apiKey, error) {
	fields := strings.Fields(line)
	d, err := authtoken.Digest(fields[0])
	if err != nil {
		return nil, fmt.Errorf("an entry starting with %s is not a SHA-256 digest (64 hex digits)", authtoken.HashPrefix)
	}
	k := &apiKey{digest: d, name: "key-" + strconv.Itoa(ordinal), rpm: c.KeyRequestsPerMinute, tpm: c.KeyTokensPerMinute}
	for _, f := range fields[1:] {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("field %d is not name=value (name=, rpm=, tpm= or priority=)", 1+indexOf(fields, f))
		}
		switch name {
		case "name":
			if !keyNameRE.MatchString(val) {
				return nil, fmt.Errorf("invalid name=%q: a name is 1 to 64 letters, digits, '_', '.' or '-'", val)
			}
			if sha256.Sum256([]byte(val)) == d {
				return nil, errors.New("a key's name must not be the key itself (names appear in metrics and logs)")
			}
			k.name = val
		case "rpm", "tpm":
			v, err := strconv.Atoi(val)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("invalid %s=%q: want a whole number >= 0 (0: no limit)", name, val)
			}
			if name == "rpm" {
				k.rpm = v
			} else {
				k.tpm = v
			}
		case "priority":
			v, err := parsePriority(val)
			if err != nil {
				return nil, fmt.Errorf("invalid priority=%q: want a whole number from %d to %d", val, -maxPriority, maxPriority)
			}
			k.priority = v
		default:
			return nil, fmt.Errorf("unknown field %q: valid fields are name=, rpm=, tpm= and priority=", name)
		}
	}
	return k, nil
}

func indexOf(fields []string, f string) int {
	for i, x := range fields {
		if x == f {
			return i
		}
	}
	return -1
}

// start makes every key's buckets, full.
func (r *keyring) start() {
	now := r.now()
	for _, k := range r.keys {
		k.requests, k.tokens = newTokenBucket(k.rpm, now), newTokenBucket(k.tpm, now)
	}
}

// lookup returns the key of a bearer token, or nil. It compares the token's
// digest with every key's, in constant time, whatever matches, so that the
// time taken tells nothing about the keys.
func (r *keyring) lookup(token string) *apiKey {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i, k := range r.keys {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(k.digest[:], d[:]), i, found)
	}
	if found < 0 {
		return nil
	}
	return r.keys[found]
}

// apiKeyCtx is the context key of the request's *apiKey.
type apiKeyCtx struct{}

func apiKeyOf(ctx context.Context) *apiKey {
	k, _ := ctx.Value(apiKeyCtx{}).(*apiKey)
	return k
}

// keyMetrics count each key's use and limits by its name (never the key):
// the names come from the key file, so the label set is bounded by it.
type keyMetrics struct {
	requests    *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
}

func newKeyMetrics() *keyMetrics {
	return &keyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_api_key_requests_total",
			Help: "API requests authenticated by each API key, by the key's name from the key file (never the key).",
		}, []string{"key_name"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_api_key_tokens_total",
			Help: "Tokens charged to each API key, by key name and kind (prompt or completion).",
		}, []string{"key_name", "kind"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_frontend_rate_limited_total",
			Help: "Requests answered 429 because an API key was over its limit, by key name and limit (requests or tokens).",
		}, []string{"key_name", "limit"}),
	}
}

// keyCollector exports each key's limits and what its buckets hold now, read
// at scrape time.
type keyCollector struct {
	ring       *keyring
	limit, ava *prometheus.Desc
}

func newKeyCollector(ring *keyring) *keyCollector {
	return &keyCollector{ring: ring,
		limit: prometheus.NewDesc("switchyard_frontend_api_key_limit_per_minute",
			"Each API key's limit per minute (0: none), by key name and limit (requests or tokens).", []string{"key_name", "limit"}, nil),
		ava: prometheus.NewDesc("switchyard_frontend_api_key_available",
			"What each limited API key's bucket holds now (negative: overdrawn by completion tokens), by key name and limit.", []string{"key_name", "limit"}, nil)}
}

func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.limit; ch <- c.ava }

func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.ring.now()
	for _, k := range c.ring.keys {
		for _, b := range []struct {
			limit string
			per   int
			b     *tokenBucket
		}{{limitRequests, k.rpm, k.requests}, {limitTokens, k.tpm, k.tokens}} {
			ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(b.per), k.name, b.limit)
			if b.per > 0 {
				ch <- prometheus.MustNewConstMetric(c.ava, prometheus.GaugeValue, b.b.available(now), k.name, b.limit)
			}
		}
	}
}

// authenticate finds the request's API key and takes one request from its
// bucket. With no keys configured every request passes (k is nil).
func (s *Service) authenticate(r *http.Request) (k *apiKey, err error) {
	if s.keys == nil {
		return nil, nil
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, ErrUnauthorized
	}
	if k = s.keys.lookup(strings.TrimSpace(token)); k == nil {
		return nil, ErrUnauthorized
	}
	s.keyMetrics.requests.WithLabelValues(k.name).Inc()
	if ok, wait := k.requests.take(s.keys.now(), 1); !ok {
		s.keyMetrics.rateLimited.WithLabelValues(k.name, limitRequests).Inc()
		return k, &rateLimitError{limit: limitRequests, per: k.rpm, need: 1, wait: wait}
	}
	return k, nil
}

// admitTokens takes a generation's prompt tokens (times its choices) from
// the key's token bucket.
func (s *Service) admitTokens(ctx context.Context, prompt int) error {
	k := apiKeyOf(ctx)
	if k == nil {
		return nil
	}
	if ok, wait := k.tokens.take(s.keys.now(), prompt); !ok {
		s.keyMetrics.rateLimited.WithLabelValues(k.name, limitTokens).Inc()
		return &rateLimitError{limit: limitTokens, per: k.tpm, need: min(prompt, k.tpm), wait: wait}
	}
	s.keyMetrics.tokens.WithLabelValues(k.name, "prompt").Add(float64(prompt))
	return nil
}

// chargeCompletion charges the tokens a generation produced to its key.
func (s *Service) chargeCompletion(ctx context.Context, completion uint32) {
	k := apiKeyOf(ctx)
	if k == nil || completion == 0 {
		return
	}
	k.tokens.charge(s.keys.now(), int(completion))
	s.keyMetrics.tokens.WithLabelValues(k.name, "completion").Add(float64(completion))
}

// len is the number of keys; a nil keyring has none.
func (r *keyring) len() int {
	if r == nil {
		return 0
	}
	return len(r.keys)
}
