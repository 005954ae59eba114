//go:build !linux

package framework

import "syscall"

// childProcAttr has nothing to add outside Linux: a child outlives a test binary that
// panics.
func childProcAttr() *syscall.SysProcAttr { return nil }
