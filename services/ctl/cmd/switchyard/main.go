// Command switchyard is the operator's CLI: status, route, workers, events.
package main

import (
	"os"

	"github.com/switchyard-llm/switchyard/services/ctl"
)

func main() { os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr)) }
