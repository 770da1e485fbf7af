package cli

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Set at link time by `make images` (go build -ldflags "-X ..."), where the
// build has no VCS stamp: the release version and the git revision.
var (
	version  string
	revision string
)

// BuildInfo is what a binary knows of how it was built.
type BuildInfo struct {
	// Version is the release version (set at link time), else the main
	// module's version ("(devel)" for a build from a checkout).
	Version string
	// Revision and Time are the VCS revision and commit time stamped by go
	// build, with Modified for uncommitted changes; empty when not stamped.
	Revision, Time string
	Modified       bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// ReadBuildInfo returns this binary's build information.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: version, Revision: revision}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = info.GoVersion
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Revision == "" {
				b.Revision = s.Value
			}
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line --version prints after the binary's name.
func (b BuildInfo) String() string {
	v := b.Version
	if v == "" {
		v = "(unknown)"
	}
	parts := []string{v}
	if b.Revision != "" {
		rev := b.Revision
		if b.Modified {
			rev += "-dirty"
		}
		parts = append(parts, "revision "+rev)
	}
	if b.Time != "" {
		parts = append(parts, "committed "+b.Time)
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return strings.Join(parts, ", ")
}

func printVersion(name string, w interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(w, "%s %s\n", name, ReadBuildInfo())
}
