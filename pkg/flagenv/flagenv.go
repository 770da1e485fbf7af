// Package flagenv fills command-line flags from environment variables, so that
// every setting of a service can come from either place and the command line
// wins (the pattern of etcd's pkg/flags SetFlagsFromEnv).
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Set fills each flag of fs that was not given on the command line from the
// environment. A flag named in named uses that variable (for example
// "etcd-endpoints" -> "ETCD_ENDPOINTS"); every other flag uses prefix plus the
// flag name in upper snake case ("grpc-addr" with prefix "SWITCHYARD_REGISTRY_"
// -> "SWITCHYARD_REGISTRY_GRPC_ADDR"). An empty prefix disables the generic
// names. An invalid value is an error naming the variable, the value and the
// flag's own complaint.
func Set(fs *flag.FlagSet, prefix string, named map[string]string) error {
	return setFrom(fs, prefix, named, os.LookupEnv)
}

func setFrom(fs *flag.FlagSet, prefix string, named map[string]string, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		env, ok := named[f.Name]
		if !ok {
			if prefix == "" {
				return
			}
			env = EnvName(prefix, f.Name)
		}
		val, ok := lookup(env)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, val); serr != nil {
			err = fmt.Errorf("invalid value %q for %s (flag --%s): %w", val, env, f.Name, serr)
		}
	})
	return err
}

// EnvName is the generic variable for a flag: prefix + upper snake case name.
func EnvName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// PrintDefaults writes the usage of every flag of fs to fs.Output(), as
// flag.PrintDefaults does, each followed by the environment variable that
// sets it (the one Set reads), so that --help names them all.
func PrintDefaults(fs *flag.FlagSet, prefix string, named map[string]string) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch {
		case isZeroDefault(f):
		case fmt.Sprintf("%T", f.Value) == "*flag.stringValue": // quoted, as flag does
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(w, " (default %v)", f.DefValue)
		}
		env, ok := named[f.Name]
		if !ok && prefix != "" {
			env, ok = EnvName(prefix, f.Name), true
		}
		if ok {
			fmt.Fprintf(w, " [$%s]", env)
		}
		fmt.Fprintln(w)
	})
}

func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
