package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxChildEnv marks the process that runs the sandbox, below its guard.
const sandboxChildEnv = "KAIROS_SANDBOX_CHILD"

// guard runs the sandbox as a child process and outlives it: it is the child subreaper of
// everything the sandbox starts (the management API server and etcd, the workload clusters'
// processes), so when the sandbox ends in a way that runs no cleanup (kill -9, a crash), their
// orphans come to the guard, which stops them. The same goes for the sandbox's files: the child
// runs with TMPDIR set to a folder of the guard's, where everything temporary of the sandbox
// and its processes goes (its repositories, the API servers' certificates and etcd data, the
// simulated nodes), and the guard removes that folder, and the management kubeconfig's link
// into it, once the sandbox and its orphans ended. Ctrl-C reaches the sandbox directly (same
// process group); a signal sent to the guard alone is passed on. It returns the sandbox's exit
// code.
func guard() (code int, guarded bool) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox: cannot become a child subreaper, running unguarded:", err)
	}
	// The sandbox handles interrupts; the guard must not die of them before it.
	signal.Ignore(syscall.SIGPIPE)
	interrupts := make(chan os.Signal, 2)
	signal.Notify(interrupts, os.Interrupt, syscall.SIGTERM)
	defer takeTerminal()()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 1, true
	}
	tmp, err := os.MkdirTemp("", "kairos-sandbox-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 1, true
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), sandboxChildEnv+"=1", sandboxTmpDirEnv+"="+os.TempDir(), "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 1, true
	}
	go func() {
		for sig := range interrupts {
			_ = cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait()
	stopOrphans()
	// The sandbox removes its link when it ends cleanly; after a kill, the guard does.
	unpublishInto(kubeconfigLink(), tmp)
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), true
	default:
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 1, true
	}
}

// stopOrphans stops every process that became the guard's child: SIGTERM to each one's process
// group (envtest starts its processes in their own groups), SIGKILL after a grace period.
func stopOrphans() {
	orphans := childrenOf(os.Getpid())
	if len(orphans) == 0 {
		return
	}
	signalAll := func(sig syscall.Signal) {
		for _, pid := range orphans {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid != syscall.Getpgrp() {
				_ = syscall.Kill(-pgid, sig)
			}
			_ = syscall.Kill(pid, sig)
		}
	}
	signalAll(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && reap(orphans) {
		time.Sleep(100 * time.Millisecond)
	}
	signalAll(syscall.SIGKILL)
	for reap(orphans) {
		time.Sleep(50 * time.Millisecond)
	}
}

// reap collects the orphans that ended and reports whether any still runs.
func reap(pids []int) bool {
	running := false
	for _, pid := range pids {
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == 0 {
			running = true
		}
	}
	return running
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// outputClosed reports whether f is a pipe or terminal whose other end went away: the pager the
// sandbox's output was piped into quit (POLLERR on a pipe without reader), or its terminal hung
// up (POLLHUP). A file or a live pipe reports neither.
func outputClosed(f *os.File) bool {
	fds := []unix.PollFd{{Fd: int32(f.Fd())}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
}

// takeTerminal puts the sandbox in a process group of its own in the foreground of its terminal,
// as a shell does with a job, and returns what gives the terminal back. Ctrl-C then interrupts
// the sandbox alone: make, which runs it, would otherwise get the SIGINT too and end by it
// (status 130) whatever the sandbox returns, since GNU make re-raises a fatal signal once its
// children are done. A sandbox stopped by Ctrl-C is a normal end: exit 0, no make error. Without
// a terminal, or when not in its foreground (make ... &), nothing changes.
func takeTerminal() (giveBack func()) {
	fd := int(os.Stdin.Fd())
	foreground, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || foreground != unix.Getpgrp() {
		return func() {}
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return func() {}
	}
	// A process outside the foreground group that changes it gets SIGTTOU (tcsetpgrp(3)), which
	// would stop it: the guard is such a process right after Setpgid.
	signal.Ignore(syscall.SIGTTOU)
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
		// Back into make's group, which Ctrl-C reaches: the sandbox still stops, make ends by it.
		_ = unix.Setpgid(0, foreground)
		fmt.Fprintln(os.Stderr, "sandbox: cannot take the terminal's foreground, Ctrl-C reaches make too:", err)
		return func() {}
	}
	return func() { _ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, foreground) }
}
