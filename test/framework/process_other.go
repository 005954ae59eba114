//go:build !linux

package framework

import "syscall"

// childProcAttr sets nothing: outside Linux a child outlives a test binary that panics.
func childProcAttr() *syscall.SysProcAttr {
	return nil
}
