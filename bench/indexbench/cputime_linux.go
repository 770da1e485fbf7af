package indexbench

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPU is the CPU time the calling OS thread has used
// (CLOCK_THREAD_CPUTIME_ID): on a machine shared with other work, a
// decision's own cost without the time the scheduler gave to others.
func ThreadCPU() (time.Duration, bool) {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
