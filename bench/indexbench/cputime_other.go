//go:build !linux

package indexbench

import "time"

// ThreadCPU is not measured outside Linux.
func ThreadCPU() (time.Duration, bool) { return 0, false }
