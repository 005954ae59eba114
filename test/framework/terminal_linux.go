package framework

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartProcessOnTerminal is StartProcess as a user runs a command in a terminal: in a session of
// its own whose controlling terminal is a new pseudo-terminal, which is its stdin, stdout and
// stderr. The terminal then decides who gets a Ctrl-C (its foreground process group), as it does
// for a user; Type sends keys to it. The output is read from the terminal (with the terminal's
// \r\n line ends).
func StartProcessOnTerminal(name, logPath string, env []string, bin string, args ...string) (*Process, error) {
	master, slave, err := openTerminal()
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	f, err := os.Create(logPath)
	if err != nil {
		master.Close()
		slave.Close()
		return nil, err
	}
	p := &Process{Name: name, LogPath: logPath, log: f, done: make(chan struct{}), term: master}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = slave, slave, slave
	// Setctty makes the terminal (the child's fd 0) the controlling terminal of the new session,
	// with the session leader's process group in the foreground, as a shell leaves it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := StartOnLockedThread(p.cmd, func(err error) {
		p.err = err
		close(p.done)
	}); err != nil {
		master.Close()
		slave.Close()
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	// Only the child's copy stays open: once every process holding the terminal has ended,
	// reading the master ends with EIO.
	slave.Close()
	go func() { _, _ = io.Copy(p, master) }()
	return p, nil
}

// Type writes keys to the terminal of a process started with StartProcessOnTerminal ("\x03" is
// Ctrl-C).
func (p *Process) Type(keys string) error {
	if p.term == nil {
		return errors.New(p.Name + " has no terminal")
	}
	_, err := p.term.Write([]byte(keys))
	return err
}

// openTerminal opens a new pseudo-terminal pair (pty(7)): the master, which plays the user,
// and the slave, which the process gets.
func openTerminal() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("unlocking the pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("naming the pseudo-terminal: %w", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		return nil, nil, fmt.Errorf("opening the pseudo-terminal's slave: %w", err)
	}
	return m, s, nil
}
