package main

import (
	"os"
	"syscall"
)

// fileUID is the owner of a file.
func fileUID(st os.FileInfo) int { return int(st.Sys().(*syscall.Stat_t).Uid) }
