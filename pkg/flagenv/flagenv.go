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
