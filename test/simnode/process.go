package simnode

import (
	"bytes"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// process is a child process (etcd or kube-apiserver) that dies with the test process.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

// startProcess starts binary with args, logging to dir/<name>.log. It dies with the test
// process (see framework.StartOnLockedThread for why the start needs a locked thread).
func startProcess(dir, name, binary string, args []string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	if err := framework.StartOnLockedThread(cmd, func(err error) {
		p.err = err
		_ = logFile.Close()
		close(p.done)
	}); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return p, nil
}

// childEnv is the environment of the simulated clusters' processes: this process's, with one
// processor for Go's scheduler (GOMAXPROCS=1) unless GOMAXPROCS is set already. A test package
// runs dozens of these processes side by side, each mostly waiting, and with a processor per
// core each spent much of its time in the scheduler itself: the runtime's monitor thread keeps
// polling while any processor is busy, and idle threads spin looking for work whenever a
// timer or packet wakes one. Measured on an idle three-node k0s cluster (AMD EPYC, 2 cores, 60
// s): its etcd members used 3.0 CPU-seconds instead of 3.7, its kube-apiserver 1.0 instead of
// 1.4; the lifecycle package (the same scenarios) took 1352 CPU-seconds instead of 1419 and
// 795 s instead of 831. Nothing a node does depends on it: a busy process runs its Go code on
// one core at a time, and the machine's other core goes to the other processes.
func childEnv() []string {
	env := os.Environ()
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		env = append(env, "GOMAXPROCS=1")
	}
	return env
}

// exited tells whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop terminates the process: SIGTERM, then SIGKILL after a grace period (at once without
// one).
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	if grace <= 0 {
		_ = p.cmd.Process.Kill()
		<-p.done
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail returns the end of the process log, for error messages.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(data, nil)), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on right now, below the kernel's
// ephemeral range (32768 and up on Linux): a port that is bound later, or again after a restart,
// cannot be taken meanwhile by the source port of some outgoing connection, which a port picked
// with :0 can.
func freePort() (int, error) {
	for range 200 {
		port := 10000 + mathrand.IntN(22000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, errors.New("no free port on 127.0.0.1 between 10000 and 32000")
}
