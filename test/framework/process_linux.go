package framework

import "syscall"

// childProcAttr makes the kernel kill a child process when the test process ends.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
