package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// TestHAControlPlaneUpgradesInPlace (issue 20, b): a three-node control plane moves to the next
// minor version and Kairos image in place, one Machine at a time, on real etcd members: the
// workload API answers throughout, etcd never has fewer than two healthy voters, no Machine is
// created or deleted and at most one is updating at any moment. While one member's etcd is down
// the next Machine's update does not start, and the KairosControlPlane says why; it resumes once
// the member is back.
//
// Both distributions: k0s adds a voting member and k3s a learner it promotes later, and an
// in-place update must add neither: the node reboots into its new image and its etcd starts
// again on its data directory as the same member (same member IDs, no learner ever seen).
func TestHAControlPlaneUpgradesInPlace(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{inPlace: true, replicas: 3, version: version, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Image = kairosImage(dist, version)
				// No surge: a rollout that may not create a Machine can only update in place.
				s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
			}})
			before := c.waitSettled(3, version, waitScale)
			t.Logf("three control-plane Machines settled after %s", time.Since(start).Round(time.Second))
			sim := c.simCluster()
			if err := sim.InstallKairosOperator(c.ctx); err != nil {
				t.Fatal(err)
			}
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}}
			if err := wl.Create(c.ctx, probe); err != nil {
				t.Fatal(err)
			}
			nodesBefore := map[string]corev1.Node{}
			for _, m := range before {
				n := corev1.Node{}
				if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, &n); err != nil {
					t.Fatal(err)
				}
				nodesBefore[m.Name] = n
			}
			members := sim.EtcdMembers()

			count := c.watchMachineCount()
			updating := c.watchUpdatingAtOnce()
			api := probeWorkloadAPI(c.ctx, wl, client.ObjectKeyFromObject(probe))
			voters := sampleEtcdVoters(c.ctx, sim)

			// The operator reports no node done until the test has stopped the member below.
			sim.HoldUpgradeCompletion(true)
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Version = inPlaceVersion
				s.KairosConfigSpec.Image = kairosImage(dist, inPlaceVersion)
			})

			// One member's etcd stops while the first Machine's update completes: that node has
			// rebooted into the new image and its member is back (two others healthy), so the
			// member stopped now leaves two healthy voters. The next Machine's update must then
			// wait for it, not take a second member down. The member is one of a Machine already
			// updated, not of one still to update: an outdated Machine whose own member is
			// unhealthy is the one a rollout picks first and, as KubeadmControlPlane does, it is
			// replaced rather than updated in place (its deletion passes the preflight checks
			// that leave it out, and a new Machine repairs it while an update would not), so no
			// update would wait for it.
			first := c.firstUpdating(2 * time.Minute)
			dead := c.stopEtcdOnceRebooted(first, kairosImage(dist, inPlaceVersion), 3*time.Minute)
			stopped := time.Now()
			c.waitCondition(controlplanev1.RollingOutCondition, metav1.ConditionTrue, "Machine "+dead.Name+": etcd member", 2*time.Minute)
			t.Logf("the update waits for the etcd member of %s: %s", dead.Name, conditions.Get(c.get(), controlplanev1.RollingOutCondition).Message)
			if seen := updating.seenMachines(); len(seen) != 1 {
				t.Errorf("Machines %v were updated while the etcd member of %s was down", seen, dead.Name)
			}
			if err := c.nodeOf(*dead).StartEtcd(); err != nil {
				t.Fatal(err)
			}
			resumed := time.Now()
			t.Logf("the etcd member of %s was down for %s", dead.Name, resumed.Sub(stopped).Round(time.Second))

			after := c.waitSettled(3, inPlaceVersion, 3*waitScale)
			t.Logf("the other two Machines upgraded in place %s after the member came back (%s in all)",
				time.Since(resumed).Round(time.Second), time.Since(start).Round(time.Second))
			most, fewest := count.result()
			apiFailures, probes := api.result()
			fewestVoters, votersAt, samples, learners := voters.result()

			if most != 3 || fewest != 3 {
				t.Errorf("Machines were created or deleted: up to %d and down to %d active; at the peak: %s", most, fewest, count.peakMachines())
			}
			uids := map[string]bool{}
			for _, m := range before {
				uids[string(m.UID)] = true
			}
			for _, m := range after {
				if !uids[string(m.UID)] {
					t.Errorf("Machine %s (uid %s) is new", m.Name, m.UID)
				}
			}
			if peak, at := updating.peak(); peak > 1 {
				t.Errorf("%d Machines were updating at once: %s", peak, at)
			}
			if seen := updating.seenMachines(); len(seen) != 3 {
				t.Errorf("Machines seen updating: %v, want all three", seen)
			}
			if len(apiFailures) > 0 {
				t.Errorf("the workload API failed %d of %d probes: %s", len(apiFailures), probes, strings.Join(apiFailures, "; "))
			}
			if fewestVoters < 2 {
				t.Errorf("etcd had %d voters up at one point (of %d samples): %s", fewestVoters, samples, votersAt)
			}
			if d, at := voters.leaderless(); d > leaderlessLimit {
				t.Errorf("an etcd member knew no leader for %s (more than %s): %s", d.Round(time.Millisecond), leaderlessLimit, at)
			} else if at != "" {
				t.Logf("a member knew no leader for %s at most (an election as leadership moved): %s", d.Round(time.Millisecond), at)
			}
			if len(learners) > 0 {
				t.Errorf("etcd had learners, so a member joined again: %v", learners)
			}
			t.Logf("%d API probes, %d etcd samples, at least %d voters up", probes, samples, fewestVoters)

			if m := sim.EtcdMembers(); !sameMembers(m, members) {
				t.Errorf("etcd members after the update %+v, before %+v", m, members)
			}
			for _, m := range after {
				n := corev1.Node{}
				if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, &n); err != nil {
					t.Fatal(err)
				}
				was := nodesBefore[m.Name]
				if n.UID != was.UID || n.Spec.ProviderID != was.Spec.ProviderID {
					t.Errorf("Node of Machine %s: %s uid %s providerID %q, was %s uid %s providerID %q",
						m.Name, n.Name, n.UID, n.Spec.ProviderID, was.Name, was.UID, was.Spec.ProviderID)
				}
				if running := c.nodeOf(m).RunningImage(); running != kairosImage(dist, inPlaceVersion) {
					t.Errorf("the node of Machine %s runs image %s, want %s", m.Name, running, kairosImage(dist, inPlaceVersion))
				}
			}
		})
	}
}

// firstUpdating waits for the first control-plane Machine the control plane updates in place.
func (c *cpCluster) firstUpdating(timeout time.Duration) *clusterv1.Machine {
	c.t.Helper()
	var first *clusterv1.Machine
	framework.Eventually(c.t, timeout, func() error {
		machines, err := c.controlPlaneMachines()
		if err != nil {
			return err
		}
		for i := range machines {
			if machineUpdating(&machines[i]) {
				first = &machines[i]
				return nil
			}
		}
		return fmt.Errorf("no control-plane Machine is updating yet (%s)", c.kcpProblems())
	})
	return first
}

// stopEtcdOnceRebooted stops the etcd member of Machine m as soon as its node runs image again,
// while Cluster API has not finished the Machine's update: the simulated operator holds the
// report of the node's upgrade (HoldUpgradeCompletion, set before the update) until the member is
// stopped, so the update cannot end before, however slow the machine. No other Machine can have
// started updating then, so stopping the member leaves two of three healthy.
func (c *cpCluster) stopEtcdOnceRebooted(m *clusterv1.Machine, image string, timeout time.Duration) *clusterv1.Machine {
	c.t.Helper()
	node := c.nodeOf(*m)
	deadline := time.Now().Add(timeout)
	// The node's state is in this process: polled often, it costs nothing but a lock.
	for node.Status().Phase != simnode.PhaseRunning || node.RunningImage() != image {
		if time.Now().After(deadline) {
			c.t.Fatalf("the node of Machine %s did not come back on %s within %s: %s", m.Name, image, timeout, node)
		}
		time.Sleep(50 * time.Millisecond)
	}
	machines, err := c.controlPlaneMachines()
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range machines {
		switch {
		case machines[i].Name == m.Name && !machineUpdating(&machines[i]):
			c.t.Fatalf("Machine %s finished its update before its etcd member could be stopped: the window was missed", m.Name)
		case machines[i].Name != m.Name && machineUpdating(&machines[i]):
			c.t.Fatalf("Machine %s is updating while Machine %s still is", machines[i].Name, m.Name)
		}
	}
	// Stopped, not killed: a killed leader leaves the others without one until they elect
	// another, which the voter samples would count against the update, while the stop hands
	// leadership over (etcd's own graceful stop) and leaves exactly two healthy voters.
	if err := node.StopEtcd(); err != nil {
		c.t.Fatal(err)
	}
	c.simCluster().HoldUpgradeCompletion(false)
	return m
}

// sameMembers tells whether two etcd member lists (sorted by name) hold the same members.
func sameMembers(a, b []simnode.EtcdMember) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i].MemberID != b[i].MemberID || a[i].NodeName != b[i].NodeName {
			return false
		}
	}
	return true
}

// updatingAtOnceWatch records how many control-plane Machines were being updated in place at
// the same time, at most, and which ever were. A Machine counts from the moment the control plane
// marks it (update-in-progress annotation) until Cluster API's Machine controller has finished
// (no UpdateMachine hook pending, Updating not true), so that a next Machine started before the
// previous one is done counts as two.
type updatingAtOnceWatch struct {
	mu     sync.Mutex
	most   int
	mostAt string
	seen   map[string]bool
	// reported are the Machines seen with Updating=True, the condition users read.
	reported map[string]bool
}

func (c *cpCluster) watchUpdatingAtOnce() *updatingAtOnceWatch {
	c.t.Helper()
	w := &updatingAtOnceWatch{seen: map[string]bool{}, reported: map[string]bool{}}
	err := c.h.Observe(c.ctx, &clusterv1.Machine{}, func(objects []client.Object) {
		var now, reported []string
		for _, o := range objects {
			m := o.(*clusterv1.Machine)
			if !c.isControlPlaneMachine(m) {
				continue
			}
			if machineUpdating(m) {
				now = append(now, m.Name)
			}
			if conditions.IsTrue(m, clusterv1.MachineUpdatingCondition) {
				reported = append(reported, m.Name)
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range now {
			w.seen[n] = true
		}
		for _, n := range reported {
			w.reported[n] = true
		}
		if len(now) > w.most {
			w.most, w.mostAt = len(now), strings.Join(now, ", ")
		}
	})
	if err != nil {
		c.t.Fatal(fmt.Errorf("watching Machines: %w", err))
	}
	return w
}

// machineUpdating tells whether a Machine is being updated in place, by any of the marks the
// control plane and Cluster API's Machine controller put on it.
func machineUpdating(m *clusterv1.Machine) bool {
	_, started := m.Annotations[clusterv1.UpdateInProgressAnnotation]
	return started || strings.Contains(m.Annotations["runtime.cluster.x-k8s.io/pending-hooks"], "UpdateMachine") ||
		conditions.IsTrue(m, clusterv1.MachineUpdatingCondition)
}

func (w *updatingAtOnceWatch) peak() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.mostAt
}

// reportedUpdating tells whether Machine name was seen with Updating=True.
func (w *updatingAtOnceWatch) reportedUpdating(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reported[name]
}

func (w *updatingAtOnceWatch) seenMachines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for n := range w.seen {
		out = append(out, n)
	}
	return out
}

// apiProbe reads an object from the workload API server over and over, with a quorum read
// (client.Get sends no resourceVersion, so the API server reads etcd), and records the failures.
type apiProbe struct {
	mu       sync.Mutex
	failures []string
	probes   int
	stop     context.CancelFunc
	done     chan struct{}
}

// probeInterval is how often the workload API and etcd are probed: often enough to catch a
// reboot's gap (a simulated node's reboot takes seconds), rarely enough to leave the two cores to
// the scenario.
const probeInterval = 250 * time.Millisecond

func probeWorkloadAPI(ctx context.Context, wl client.Client, key client.ObjectKey) *apiProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &apiProbe{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			// A request that takes longer than this counts as a failure: a client with a
			// timeout would give up.
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			err := wl.Get(rctx, key, &corev1.ConfigMap{})
			rcancel()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.probes++
			if err != nil {
				p.failures = append(p.failures, time.Now().UTC().Format("15:04:05.000")+" "+err.Error())
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(probeInterval):
			}
		}
	}()
	return p
}

func (p *apiProbe) result() (failures []string, probes int) {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures, p.probes
}

// voterSampler asks every etcd member for its status over and over (simnode.EtcdHealth) and
// records the fewest voting members up at once (answering; healthy, or leaderless during an
// election) and the longest time some member that answered knew no leader.
//
// A member that knows no leader still holds its vote: when leadership moves (a leader stopped
// for a reboot hands it over first) the followers other than the new leader know none until its
// first append, a few hundred milliseconds at etcd's default election timeout of one second.
// A sample in that window saw "1 healthy voter" of three in one run out of three (2026-11-28),
// while two members were up and quorum held. What losing quorum looks like instead: fewer than
// two members up, or no leader for longer than leaderlessLimit.
type voterSampler struct {
	mu       sync.Mutex
	fewest   int
	fewestAt string
	samples  int
	learners []string
	// leaderlessSince is when the current stretch of samples with a leaderless member began
	// (zero when the last sample had none); longestLeaderless and its description the longest
	// such stretch.
	leaderlessSince   time.Time
	longestLeaderless time.Duration
	leaderlessAt      string
	stop              context.CancelFunc
	done              chan struct{}
}

// leaderlessLimit is how long an election may leave a member without a leader before it counts
// as lost quorum: a few election timeouts (etcd's default is one second), which a move of
// leadership never takes and a cluster without quorum always exceeds.
const leaderlessLimit = 5 * time.Second

func sampleEtcdVoters(ctx context.Context, sim *simnode.Cluster) *voterSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &voterSampler{fewest: 1 << 30, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			health := sim.EtcdHealth(ctx, 2*time.Second)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			up, leaderless := 0, false
			var states []string
			for _, m := range health {
				if (m.Healthy || m.Leaderless) && !m.IsLearner {
					up++
				}
				leaderless = leaderless || m.Leaderless
				state := "healthy"
				if !m.Healthy {
					state = m.Err
				}
				states = append(states, fmt.Sprintf("%s (%s): %s", m.Name, m.NodeName, state))
			}
			at := now.UTC().Format("15:04:05.000") + " " + strings.Join(states, "; ")
			s.mu.Lock()
			s.samples++
			if up < s.fewest {
				s.fewest, s.fewestAt = up, at
			}
			switch {
			case !leaderless:
				s.leaderlessSince = time.Time{}
			case s.leaderlessSince.IsZero():
				s.leaderlessSince = now
			}
			if !s.leaderlessSince.IsZero() {
				if d := now.Sub(s.leaderlessSince); d >= s.longestLeaderless {
					s.longestLeaderless, s.leaderlessAt = d, at
				}
			}
			for _, m := range health {
				if m.IsLearner {
					s.learners = append(s.learners, m.Name)
				}
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(probeInterval):
			}
		}
	}()
	return s
}

func (s *voterSampler) result() (fewest int, at string, samples int, learners []string) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fewest, s.fewestAt, s.samples, s.learners
}

// leaderless returns the longest stretch of samples in which some member knew no leader, and the
// last sample of it ("" when there was none).
func (s *voterSampler) leaderless() (time.Duration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longestLeaderless, s.leaderlessAt
}
