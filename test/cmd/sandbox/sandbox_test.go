package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// TestSandbox runs `make sandbox` as a user does, in a terminal (a pseudo-terminal of its own): it
// must bring the demo cluster up, let the control plane be scaled through the printed
// kubeconfig, and, stopped by Ctrl-C typed on that terminal, end cleanly with make's status 0
// and no make error, leaving no process and no file behind.
func TestSandbox(t *testing.T) {
	p, out, tmp := startSandbox(t, "sandbox", "-cluster sbx -workers 1", 6*time.Minute)
	for _, want := range []string{"clusterctl init", "KairosControlPlane/sbx-control-plane", "Available=True", "kubectl scale kairoscontrolplane sbx-control-plane"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}

	// A broken connection anywhere in the sandbox raises SIGPIPE (Go delivers it for sockets
	// too once a program asks for it): SIGPIPE is no sign of a closed output and must not stop
	// the sandbox. Only the output itself going away does (TestSandboxEndsAbruptly).
	// make's recipe execs the sandbox's guard, which runs the sandbox.
	guard := childrenOf(p.Pid())
	if len(guard) != 1 {
		t.Fatalf("make has children %v, want the sandbox's guard alone", guard)
	}
	sandbox := childrenOf(guard[0])
	if len(sandbox) != 1 {
		t.Fatalf("the guard has children %v, want the sandbox alone", sandbox)
	}
	if err := syscall.Kill(sandbox[0], syscall.SIGPIPE); err != nil {
		t.Fatal(err)
	}

	// The printed management kubeconfig works: scale the control plane as a user would.
	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no kubeconfig printed:\n%s", out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", m[1])
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kcp := &controlplanev1.KairosControlPlane{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "sbx-control-plane"}, kcp); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(kcp), kcp); err != nil {
			return err
		}
		kcp.Spec.Replicas = ptrTo[int32](3)
		return c.Update(ctx, kcp)
	})
	framework.Eventually(t, 4*time.Minute, func() error {
		if exited, err := p.Exited(); exited {
			t.Fatalf("the sandbox exited while scaling (%v):\n%s", err, tail(p.Output(), 60))
		}
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.MatchingLabels{clusterv1.MachineControlPlaneLabel: ""}); err != nil {
			return err
		}
		running := 0
		for _, m := range machines.Items {
			if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
				running++
			}
		}
		if running != 3 {
			return fmt.Errorf("%d of 3 control-plane Machines running", running)
		}
		return nil
	})

	// Interrupt it: every process it started (API servers, etcd) must be gone.
	children := descendants(p.Pid())
	if len(children) < 4 {
		t.Errorf("expected the management and workload API servers and etcds below the sandbox, found %v", children)
	}
	stopWithCtrlC(t, p, children)
	leftNothing(t, tmp)
}

// startSandbox runs `make target SANDBOX_ARGS=args` on a terminal of its own, as a user does, and
// waits up to limit for it to say it is running; it returns the process, its output so far and
// the folder it has as TMPDIR, empty at the start.
func startSandbox(t *testing.T, target, args string, limit time.Duration) (*framework.Process, string, string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	p, err := framework.StartProcessOnTerminal("make "+target, filepath.Join(t.TempDir(), "sandbox.log"), []string{"TMPDIR=" + tmp},
		"make", "-C", root, "--no-print-directory", target, "SANDBOX_ARGS="+args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(30 * time.Second) })
	framework.Eventually(t, limit, func() error {
		if exited, err := p.Exited(); exited {
			t.Fatalf("make %s exited early (%v):\n%s", target, err, p.Output())
		}
		if !strings.Contains(p.Output(), "The sandbox is running") {
			return fmt.Errorf("waiting for make %s; output so far:\n%s", target, tail(p.Output(), 20))
		}
		return nil
	})
	return p, p.Output(), tmp
}

// leftNothing checks that the sandbox, once ended, left nothing in the folder it had as TMPDIR:
// not its folders, nor those of the API servers and simulated nodes it started, nor the
// management kubeconfig (whose API server is gone).
func leftNothing(t *testing.T, tmp string) {
	t.Helper()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) > 0 {
		t.Errorf("the sandbox left %v in its TMPDIR %s", left, tmp)
	}
}

// stopWithCtrlC types Ctrl-C on the sandbox's terminal and checks that make ends with status 0
// and no make error, and that none of children (the processes below make) is left.
func stopWithCtrlC(t *testing.T, p *framework.Process, children []int) {
	t.Helper()
	if err := p.Type("\x03"); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, func() error {
		if exited, _ := p.Exited(); !exited {
			return fmt.Errorf("the sandbox still runs after Ctrl-C")
		}
		return nil
	})
	// Ctrl-C is the documented way to stop it, a normal end: status 0 and no make error. (From go
	// run, make said "make: *** [sandbox] Error 1"; with the terminal's Ctrl-C reaching make too,
	// make ended by the interrupt, status 130 in a shell.)
	if _, err := p.Exited(); err != nil || strings.Contains(p.Output(), "context canceled") || strings.Contains(p.Output(), "make: ***") {
		t.Errorf("make ended with %v after Ctrl-C, want status 0 and no make error:\n%s", err, tail(p.Output(), 10))
	}
	framework.Eventually(t, 30*time.Second, func() error {
		var alive []int
		for _, pid := range children {
			if syscall.Kill(pid, 0) == nil && !zombie(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) > 0 {
			return fmt.Errorf("processes left behind after Ctrl-C: %v", alive)
		}
		return nil
	})
}

// TestSandboxInPlace runs `make sandbox-in-place`, the README's one-command demonstration of an
// in-place Kairos upgrade (issue 20), with -restore, the demonstration of `make sandbox-restore`
// (issue 34), on the same single-node site to spare a second sandbox: a single control-plane
// node without workers comes up with etcd snapshots to the sandbox's object store, the control
// plane moves to the next minor version and Kairos image on the same Machine; then a ConfigMap is
// written, an on-demand snapshot asked for and shown, the VM destroyed, and the ConfigMap read back from the restored cluster;
// Ctrl-C ends it cleanly.
func TestSandboxInPlace(t *testing.T) {
	p, out, tmp := startSandbox(t, "sandbox-in-place", "-cluster sbxip -restore", 10*time.Minute)
	for _, want := range []string{
		"In-place updates: ExtensionConfig",
		"Restore: etcd snapshots every minute to s3://sandbox-snapshots",
		"Installing the Kairos operator in the workload cluster",
		"Upgrading in place: kubectl patch kairoscontrolplane sbxip-control-plane",
		"Updating True",
		"Upgraded in place: Machine sbxip-control-plane-",
		"runs v1.37.0+k0s with image",
		"no Machine was created or deleted",
		"Restore: kubectl annotate kairoscontrolplane sbxip-control-plane controlplane.cluster.x-k8s.io/etcd-snapshot-request=",
		"Restore: on-demand snapshot on-demand-sbxip-sbxip-control-plane-",
		"Restore: the only control-plane VM is destroyed",
		"EtcdRestored True Restored",
		"Restore: ConfigMap written-before-the-loss is back, read with the kubeconfig from before the loss",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}
	// The newest snapshot restored: the on-demand one, or a scheduled one of the same minute.
	if !regexp.MustCompile(`restored etcd snapshot (on-demand-)?sbxip-sbxip-control-plane-`).MatchString(out) {
		t.Errorf("the sandbox's output names no restored snapshot of the cluster:\n%s", out)
	}
	if strings.Contains(out, "the upgrade was not done in place") {
		t.Errorf("the sandbox replaced its Machine:\n%s", out)
	}
	stopWithCtrlC(t, p, descendants(p.Pid()))
	leftNothing(t, tmp)
}

// descendants lists every process below pid.
func descendants(pid int) []int {
	var out []int
	for _, child := range childrenOf(pid) {
		out = append(out, child)
		out = append(out, descendants(child)...)
	}
	return out
}

func zombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(data))
	return len(fields) > 2 && fields[2] == "Z"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestSandboxEndsAbruptly: a sandbox that ends without the chance to clean up leaves nothing
// running and no file behind. Its output piped into a pager that quits (the pipe closes) stops it
// cleanly (before, SIGPIPE killed it and its API servers and etcd lived on); and when the sandbox
// process is killed outright, its guard stops what it started and removes its files.
func TestSandboxEndsAbruptly(t *testing.T) {
	dir := t.TempDir()
	bin, err := framework.BuildBinary("./test/cmd/sandbox", dir, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	// start runs the sandbox with its output on a pipe and returns once the management API
	// server runs, with the processes below the sandbox at that moment.
	start := func(t *testing.T) (*exec.Cmd, *os.File, chan error, []int, string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		tmp := t.TempDir()
		cmd := exec.Command(bin, "-cluster", "abrupt", "-workers", "0")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		var below []int
		scanner := bufio.NewScanner(r)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), "Starting Cluster API") {
				below = descendants(cmd.Process.Pid)
				break
			}
		}
		if len(below) < 3 {
			t.Fatalf("expected the sandbox, the management API server and etcd below the guard, found %v", below)
		}
		return cmd, r, done, below, tmp
	}
	allGone := func(t *testing.T, pids []int) {
		framework.Eventually(t, 30*time.Second, func() error {
			var alive []int
			for _, pid := range pids {
				if syscall.Kill(pid, 0) == nil && !zombie(pid) {
					alive = append(alive, pid)
				}
			}
			if len(alive) > 0 {
				return fmt.Errorf("processes left behind: %v", alive)
			}
			return nil
		})
	}

	t.Run("output closed", func(t *testing.T) {
		_, r, done, below, tmp := start(t)
		_ = r.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the sandbox ended with %v after its output closed, want a clean stop", err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("the sandbox still runs two minutes after its output closed")
		}
		allGone(t, below)
		leftNothing(t, tmp)
	})
	t.Run("killed", func(t *testing.T) {
		cmd, r, done, below, tmp := start(t)
		defer r.Close()
		go func() { _, _ = io.Copy(io.Discard, r) }()
		sandbox := childrenOf(cmd.Process.Pid)
		if len(sandbox) != 1 {
			t.Fatalf("the guard has children %v, want the sandbox alone", sandbox)
		}
		if err := syscall.Kill(sandbox[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the guard still runs a minute after its sandbox was killed")
		}
		allGone(t, below)
		leftNothing(t, tmp)
	})
}
