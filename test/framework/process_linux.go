package framework

import "syscall"

// childProcAttr makes the kernel kill a child process when the test process ends, and puts it
// in a process group of its own when group is set.
func childProcAttr(group bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: group}
}

// SignalGroup sends sig to the process group of a process started with StartProcessGroup.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}
