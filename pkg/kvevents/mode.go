// Package kvevents names the KV event planes a worker publishes on and a
// router consumes from (--kv-events-mode), shared by workers, the router,
// the frontend and the stack so that one spelling means one thing:
//
//   - jetstream (the default): events persisted in the eventbus's JetStream
//     stream; a router restores its index snapshot and replays from there.
//   - core: events on NATS Core subjects through the eventbus (nothing
//     stored); the router fills any gap in a worker's event ids from the
//     worker's own ring (WorkerService.GetKvEvents) or rebuilds from its
//     state (GetKvState). The seed's "local indexer" mode.
//   - direct: no broker; the router watches each worker's WatchKvEvents
//     and resumes from its last event id after any break.
//   - none: no events; the router predicts caches from its own decisions
//     (--no-kv-events, --no-router-kv-events).
package kvevents

import (
	"flag"
	"fmt"
	"strings"
)

// Mode is a KV event plane.
type Mode string

// The modes.
const (
	JetStream Mode = "jetstream"
	Core      Mode = "core"
	Direct    Mode = "direct"
	None      Mode = "none"
)

// Modes lists every mode, the default first.
var Modes = []Mode{JetStream, Core, Direct, None}

// Usage is the flag's help text.
const Usage = "KV event plane: jetstream (persisted stream, snapshot + replay), core (NATS Core subjects, gaps filled from the workers), " +
	"direct (no broker: watch each worker), none (no events: approximate)"

// Parse reads a mode, case-insensitively; empty is jetstream. An unknown
// value is an error naming the valid ones.
func Parse(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	if m == "" {
		return JetStream, nil
	}
	for _, v := range Modes {
		if m == v {
			return m, nil
		}
	}
	return "", fmt.Errorf("--kv-events-mode %q: valid values are jetstream, core, direct, none", s)
}

// Flags is --kv-events-mode with its boolean spellings of none.
type Flags struct {
	// Mode is --kv-events-mode as given.
	Mode string
	// NoEvents is --no-kv-events or --no-router-kv-events (the seed's
	// spelling); either means none.
	NoEvents bool
}

// RegisterFlags adds --kv-events-mode; with noEventFlags also
// --no-kv-events and --no-router-kv-events (a service that already defines
// --no-kv-events passes false and points NoEvents at its own field with
// RegisterAlias).
func (f *Flags) RegisterFlags(fs *flag.FlagSet, noEventFlags bool) {
	fs.StringVar(&f.Mode, "kv-events-mode", string(JetStream), Usage)
	if noEventFlags {
		fs.BoolVar(&f.NoEvents, "no-kv-events", false, "no KV events (= --kv-events-mode none)")
		RegisterAlias(fs, &f.NoEvents)
	}
}

// RegisterAlias adds --no-router-kv-events, the seed's spelling of
// --no-kv-events, setting the same field.
func RegisterAlias(fs *flag.FlagSet, noEvents *bool) {
	fs.BoolVar(noEvents, "no-router-kv-events", false, "the seed's spelling of --no-kv-events")
}

// Resolve is the effective mode: none when NoEvents is set (whatever
// --kv-events-mode says, unless it says something invalid).
func (f Flags) Resolve() (Mode, error) {
	m, err := Parse(f.Mode)
	if err != nil {
		return "", err
	}
	if f.NoEvents {
		return None, nil
	}
	return m, nil
}

// Published reports whether a worker in this mode publishes to the eventbus.
func (m Mode) Published() bool { return m == JetStream || m == Core }
