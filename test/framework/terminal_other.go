//go:build !linux

package framework

import "errors"

// StartProcessOnTerminal is supported on Linux only.
func StartProcessOnTerminal(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	return nil, errors.New("running a process on a pseudo-terminal is supported on Linux only")
}

// Type is supported on Linux only.
func (p *Process) Type(string) error {
	return errors.New("typing to a terminal is supported on Linux only")
}
