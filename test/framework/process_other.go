//go:build !linux

package framework

import (
	"errors"
	"syscall"
)

// childProcAttr only puts the child in a process group of its own when group is set: outside
// Linux a child outlives a test binary that panics.
func childProcAttr(group bool) *syscall.SysProcAttr {
	if !group {
		return nil
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

// SignalGroup is not supported outside Linux.
func (p *Process) SignalGroup(syscall.Signal) error {
	return errors.New("signalling a process group is supported on Linux only")
}
