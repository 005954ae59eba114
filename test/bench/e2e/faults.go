package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// Fault is how the bootstrap manager is interrupted in the middle of a storm of configs.
type Fault string

const (
	// FaultKill kills the only manager with SIGKILL and starts it again.
	FaultKill Fault = "kill"
	// FaultLeaderLoss runs two managers with leader election and kills the leader with
	// SIGKILL; the other must take over.
	FaultLeaderLoss Fault = "leader-loss"
)

// StormOptions configure RunStorm.
type StormOptions struct {
	// N worker configs.
	N     int
	Fault Fault
	// KillAt is how many join token creates reach the workload proxy before the manager is
	// killed (default N/3): it is killed while the next one waits in the proxy, its config's
	// data Secret already written.
	KillAt int
	// LeaseDuration, RenewDeadline and RetryPeriod are the managers' leader election timings
	// with FaultLeaderLoss.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logf                                      func(string, ...any)
}

// StormResult is what a storm with a fault ended with.
type StormResult struct {
	Ready int
	// ReadyWhenKilled is how many configs were ready when the manager was killed.
	ReadyWhenKilled int
	// BetweenWrites is how many more data Secrets than join tokens were created when the
	// manager was killed: configs caught between the two (at least the one whose token create
	// was stopped).
	BetweenWrites int
	// Takeover is the time from killing the leader to the other manager holding the lease
	// (FaultLeaderLoss), for the log: it depends on the machine's speed.
	Takeover time.Duration
	// Killed and Acquired are the leader election Lease as it was right after the kill and once
	// the other manager held it (FaultLeaderLoss): what the managers themselves recorded.
	Killed, Acquired *coordinationv1.Lease
	// Problems break an invariant: a config not ready or without exactly one data Secret, a
	// data Secret written more than once, not exactly one live join token per config.
	Problems []string
	// WorkDir keeps the managers' logs when there are problems.
	WorkDir string
}

// leaseAcquired is what client-go's leader election logs when a manager becomes the leader.
const leaseAcquired = "Successfully acquired lease"

// RunStorm creates N worker KairosConfigs at once for the Kairos bootstrap manager, kills the
// manager (or the leader of two) with SIGKILL while join token create KillAt+1 waits in the
// workload proxy, lets a manager
// finish, and checks what must hold whatever the timing of the kill: every config ready with
// exactly one data Secret, each data Secret created once and never written again (a node may
// already have read it), and exactly one live join token per config, the one its data holds.
func RunStorm(ctx context.Context, o StormOptions) (res *StormResult, err error) {
	if o.KillAt == 0 {
		o.KillAt = o.N / 3
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	workDir, err := os.MkdirTemp("", "kairos-storm-")
	if err != nil {
		return nil, err
	}
	res = &StormResult{WorkDir: workDir}
	defer func() {
		if err == nil && len(res.Problems) == 0 {
			_ = os.RemoveAll(workDir)
			res.WorkDir = ""
		}
	}()
	b := &bench{o: Options{N: o.N, Providers: []Provider{Kairos}, Logf: o.Logf, WorkDir: workDir}, specs: map[Provider]providerSpec{}}
	if err := b.o.defaults(); err != nil {
		return nil, err
	}
	if err := b.build(&Result{}); err != nil {
		return nil, err
	}
	if err := b.startAPIServer(&Result{}); err != nil {
		return nil, err
	}
	defer func() { _ = b.env.Stop() }()
	defer close(b.warm)

	spec := b.specs[Kairos]
	namespace := "storm"
	mgmt, wl, kubeconfig, err := b.prepare(ctx, spec, namespace, "kairos")
	if err != nil {
		return nil, err
	}
	defer mgmt.Close()
	defer wl.Close()
	w, err := watchReady(ctx, b.cfg, spec.kind, namespace, o.N)
	if err != nil {
		return nil, err
	}
	defer w.Stop()

	var extra []string
	if o.Fault == FaultLeaderLoss {
		extra = []string{"--leader-elect", "--leader-elect-namespace=" + namespace,
			"--leader-elect-lease-duration=" + o.LeaseDuration.String(),
			"--leader-elect-renew-deadline=" + o.RenewDeadline.String(),
			"--leader-elect-retry-period=" + o.RetryPeriod.String()}
	}
	var procs []*process
	defer func() {
		for _, p := range procs {
			_ = p.Stop(10 * time.Second)
		}
	}()
	start := func(name string) (*process, error) {
		p, err := b.start(spec, namespace, kubeconfig, name, extra...)
		if err == nil {
			procs = append(procs, p)
		}
		return p, err
	}
	first, err := start("kairos-1")
	if err != nil {
		return nil, err
	}
	var standby *process
	if o.Fault == FaultLeaderLoss {
		// The first one leads; the second waits for the lease.
		if err := waitOutput(ctx, first, leaseAcquired, time.Minute); err != nil {
			return res, err
		}
		if standby, err = start("kairos-2"); err != nil {
			return nil, err
		}
	}

	// Kill in the middle of the storm, at the one moment a kill can leave half of a config
	// behind: between its two writes, the data Secret in the management cluster and then the
	// join token in the workload cluster (phases.go). The workload proxy counts the token
	// creates itself and stops the one after the first KillAt, before it is forwarded: its
	// config's data exists and its token does not, and at most KillAt configs are ready (a config
	// is ready only once its token exists), whatever the machine's speed. The manager dies while
	// it waits for the answer. (Choosing the moment from a readiness watch, or polling the
	// counts, depended on speed: the watch lagged the manager on a slower CPU and every config
	// was ready before a create arrived; polls missed gaps shorter than a poll.)
	arrived, release := wl.HoldFirst(nthCreate("secrets", o.KillAt+1))
	defer release()
	for waiting := true; waiting; {
		select {
		case <-arrived:
			waiting = false
		case <-ctx.Done():
			return res, ctx.Err()
		case <-w.Done():
			// Only if the manager created no token for some config (a bug the checks below
			// would also report).
			return res, fmt.Errorf("every config was ready before join token create %d arrived", o.KillAt+1)
		case <-time.After(100 * time.Millisecond):
			if exited, err := first.Exited(); exited {
				return res, fmt.Errorf("the manager exited before the kill (%v); log: %s", err, first.LogPath)
			}
		}
	}
	_, res.ReadyWhenKilled = w.Last()
	res.BetweenWrites = createdSecrets(mgmt) - createdSecrets(wl)
	killed := time.Now()
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		return res, fmt.Errorf("killing the manager: %w", err)
	}
	if o.Fault == FaultLeaderLoss {
		if res.Killed, err = readLease(ctx, b.client, namespace); err != nil {
			return res, err
		}
	}
	// The stopped create goes on to the API server only if its connection outlived the
	// manager; usually it ends unanswered, as a write in flight at a crash may.
	release()
	o.Logf("killed the manager with %d of %d configs ready, %d between their data and their token", res.ReadyWhenKilled, o.N, res.BetweenWrites)
	switch o.Fault {
	case FaultKill:
		if _, err := start("kairos-2"); err != nil {
			return nil, err
		}
	case FaultLeaderLoss:
		if err := waitOutput(ctx, standby, leaseAcquired, o.LeaseDuration+o.RenewDeadline+time.Minute); err != nil {
			return res, err
		}
		res.Takeover = time.Since(killed)
		if res.Acquired, err = readLease(ctx, b.client, namespace); err != nil {
			return res, err
		}
		o.Logf("the standby manager took over after %s", res.Takeover.Round(100*time.Millisecond))
	}

	timeout := time.NewTimer(b.o.ReadyTimeout)
	defer timeout.Stop()
	select {
	case <-w.Done():
	case <-timeout.C:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	_, res.Ready = w.Last()
	waitQuiet(ctx, b.o.Quiet, time.Minute, mgmt, wl)
	res.Problems = append(res.Problems, verifyData(ctx, b.client, spec.kind, namespace, o.N)...)
	res.Problems = append(res.Problems, verifyWrittenOnce(mgmt.Between(time.Time{}, time.Now()), o.N)...)
	res.Problems = append(res.Problems, verifyOneTokenEach(ctx, b.client, namespace)...)
	return res, nil
}

// leaderElectionLease names the bootstrap manager's leader election Lease (its main.go).
const leaderElectionLease = "kairos-bootstrap-manager-leader-election"

// readLease reads the bootstrap manager's leader election Lease in namespace.
func readLease(ctx context.Context, c client.Client, namespace string) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: leaderElectionLease}, l); err != nil {
		return nil, fmt.Errorf("reading the leader election Lease: %w", err)
	}
	return l, nil
}

// nthCreate matches the nth create of resource that reaches a proxy, counted by the proxy
// itself (HoldFirst calls it for every request, one at a time, until it matches).
func nthCreate(resource string, n int) func(Request) bool {
	seen := 0
	return func(r Request) bool {
		if r.Verb != "create" || r.Resource != resource {
			return false
		}
		seen++
		return seen == n
	}
}

// createdSecrets counts the Secrets created through a proxy so far (answered 201).
func createdSecrets(p *Proxy) int {
	n := 0
	for _, r := range p.Between(time.Time{}, time.Now()) {
		if r.Verb == "create" && r.Resource == "secrets" && r.Code == 201 {
			n++
		}
	}
	return n
}

// waitOutput waits until a process has printed want.
func waitOutput(ctx context.Context, p *process, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), want) {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v) before printing %q; log: %s", p.Name, err, want, p.LogPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not print %q within %s; log: %s", p.Name, want, timeout, p.LogPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// verifyWrittenOnce checks, from every request the managers made to the management cluster,
// that n Secrets were created (the proxy records no name for a create: the managers create no
// other Secret there) and that no data Secret (named after its config) was written again.
//
// A create the killed manager had in flight may have been carried out by the API server while
// its answer never reached the dead client: the proxy records it as cut short. So at most n
// creates may be answered 201, and at least n counting those; a Secret created twice would
// need a delete in between, which the second rule catches.
func verifyWrittenOnce(reqs []Request, n int) []string {
	creates, cut := 0, 0
	var problems []string
	for _, r := range reqs {
		if r.Resource != "secrets" || !r.IsWrite() {
			continue
		}
		switch {
		case r.Verb == "create" && r.Code == http.StatusCreated:
			creates++
		case r.Verb == "create" && r.Code == StatusClientClosed:
			cut++
		case r.Verb != "create" && strings.HasPrefix(r.Name, workerPrefix):
			problems = append(problems, fmt.Sprintf("data Secret %s was written again (%s, %d) after it was created", r.Name, r.Verb, r.Code))
		}
	}
	if creates > n || creates+cut < n {
		problems = append(problems, fmt.Sprintf("%d Secrets created (and %d creates cut short by the kill) for %d configs, want one each", creates, cut, n))
	}
	if len(problems) > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("... %d problems in all", len(problems)))
	}
	return problems
}

// verifyOneTokenEach checks that the live join tokens (the workload cluster is the same API
// server) are exactly the ones the data Secrets hold, one per config.
func verifyOneTokenEach(ctx context.Context, c client.Client, namespace string) []string {
	tokens := &corev1.SecretList{}
	if err := c.List(ctx, tokens, client.InNamespace(metav1.NamespaceSystem), client.MatchingFields{"type": string(bootstrapapi.SecretTypeBootstrapToken)}); err != nil {
		return []string{fmt.Sprintf("listing bootstrap tokens: %v", err)}
	}
	live := map[string]bool{}
	for _, t := range tokens.Items {
		live[string(t.Data[bootstrapapi.BootstrapTokenIDKey])] = true
	}
	data := &corev1.SecretList{}
	if err := c.List(ctx, data, client.InNamespace(namespace)); err != nil {
		return []string{fmt.Sprintf("listing data Secrets: %v", err)}
	}
	held := map[string]bool{}
	var problems []string
	for _, s := range data.Items {
		id := s.Annotations[bootstrapv1.TokenIDAnnotation]
		if id == "" {
			continue
		}
		if held[id] {
			problems = append(problems, fmt.Sprintf("two data Secrets hold token %s", id))
		}
		held[id] = true
		if !live[id] {
			problems = append(problems, fmt.Sprintf("data Secret %s holds token %s, which does not exist", s.Name, id))
		}
	}
	var orphans []string
	for id := range live {
		if !held[id] {
			orphans = append(orphans, id)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		problems = append(problems, fmt.Sprintf("%d live join tokens no data holds: %v", len(orphans), orphans))
	}
	return problems
}
