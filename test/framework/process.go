package framework

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BuildBinary builds a main package of the workspace (pkg is relative to the repository root,
// e.g. "./bootstrap") into dir/name, with extra go build flags (such as the -ldflags of a
// release build), and returns the binary's path.
func BuildBinary(pkg, dir, name string, flags ...string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, stderr.String())
	}
	return out, nil
}

// Process is a local process whose output (stdout and stderr together) is kept in memory and
// written to a log file.
type Process struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	term *os.File // the process' terminal (StartProcessOnTerminal), nil otherwise
	done chan struct{}
	err  error // exit status, set before done is closed

	mu  sync.Mutex
	out bytes.Buffer
}

// StartProcess starts bin with args and env (added to this process' environment, later
// entries winning), logging its output to logPath.
func StartProcess(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, LogPath: logPath, log: f, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	// Where supported, the process dies with the test binary even when cleanups do not run
	// (a test timeout panics).
	p.cmd.SysProcAttr = childProcAttr()
	if err := StartOnLockedThread(p.cmd, func(err error) {
		p.err = err
		close(p.done)
	}); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return p, nil
}

// StartOnLockedThread starts cmd from a goroutine locked to its OS thread, waits for it there
// and calls exited with the result. Linux sends the parent-death signal (Pdeathsig) when the
// thread that forked the child ends, not the process: forked from an ordinary thread, the child
// is killed as soon as that thread happens to run a goroutine that locks it and returns (the
// runtime then ends the thread). The locked thread here lives exactly as long as the child.
func StartOnLockedThread(cmd *exec.Cmd, exited func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with this goroutine, after the child has exited.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited(cmd.Wait())
	}()
	return <-started
}

// Write implements io.Writer for the process' output.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(b)
	return p.log.Write(b)
}

var _ io.Writer = &Process{}

// Output returns everything the process wrote so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to grace for the process to end, then kills it. It returns the
// process' exit error unless the process ended because of the signal.
func (p *Process) Stop(grace time.Duration) error {
	defer p.log.Close()
	if p.term != nil {
		defer p.term.Close()
	}
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s after SIGTERM and was killed", p.Name, grace)
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled() {
		return nil
	}
	return p.err
}

// Pid is the process' id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
