package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

const (
	// oldVersion and newVersions are what rollouts move between; the simulated nodes run
	// whatever their bootstrap data asks for.
	oldVersion = "v1.36.2"
	waitScale  = 4 * time.Minute
)

// cpCluster is a Cluster whose control plane is a KairosControlPlane.
type cpCluster struct {
	*harness.TestCluster
	// h is the management cluster the Cluster lives in.
	h   *harness.Harness
	t   *testing.T
	ctx context.Context
	kcp *controlplanev1.KairosControlPlane
	// key names the Cluster and the KairosControlPlane (the same name). The Cluster and kcp
	// objects are refreshed in place by get and TestCluster.Get while watchers read in other
	// goroutines; these never change.
	key client.ObjectKey
}

type cpOptions struct {
	// mgmt is the management cluster; default: the package's h.
	mgmt           *harness.Harness
	replicas       int32
	version        string
	failureDomains []string
	mutate         func(*controlplanev1.KairosControlPlaneSpec)
	// cluster shapes the Cluster and its KairosSimCluster (failure domains come from
	// failureDomains).
	cluster harness.ClusterOptions
	// infra is the control-plane KairosSimMachineTemplate's template spec.
	infra infrav1.KairosSimMachineSpec
	// inPlace opts the Cluster's namespace into in-place updates (harness.InPlaceNamespaceLabel).
	inPlace bool
}

// newControlPlaneCluster creates a Cluster on simulated infrastructure with a KairosControlPlane.
func newControlPlaneCluster(t *testing.T, dist bootstrapv1.Distribution, o cpOptions) *cpCluster {
	t.Helper()
	ctx := framework.Context(t)
	mh := o.mgmt
	if mh == nil {
		mh = h
	}
	ns := mh.NewNamespace(t)
	if o.inPlace {
		if err := mh.OptIntoInPlaceUpdates(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	const name = "kc"
	var fds []infrav1.KairosSimFailureDomain
	for _, fd := range o.failureDomains {
		fds = append(fds, infrav1.KairosSimFailureDomain{Name: fd, ControlPlane: ptr.To(true)})
	}
	co := o.cluster
	co.FailureDomains = fds
	co.ControlPlaneRef = &clusterv1.ContractVersionedObjectReference{
		APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: name,
	}
	tc := mh.NewCluster(t, ns, name, co)
	tmpl := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-cp"},
		Spec: infrav1.KairosSimMachineTemplateSpec{Template: infrav1.KairosSimMachineTemplateResource{Spec: o.infra}}}
	if err := mh.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	if o.version == "" {
		o.version = version
	}
	kcp := &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas:     ptr.To(o.replicas),
			Version:      o.version,
			Distribution: dist,
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: tmpl.Name,
				},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{
				UserPassword: testPassword,
				Manifests: []bootstrapv1.Manifest{{
					Name:    "platform-namespace.yaml",
					Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: " + platformNamespace + "\n",
				}},
			},
		},
	}
	if o.mutate != nil {
		o.mutate(&kcp.Spec)
	}
	if err := mh.Client.Create(ctx, kcp); err != nil {
		t.Fatal(err)
	}
	return &cpCluster{TestCluster: tc, h: mh, t: t, ctx: ctx, kcp: kcp, key: client.ObjectKey{Namespace: ns, Name: name}}
}

// get refreshes the KairosControlPlane.
func (c *cpCluster) get() *controlplanev1.KairosControlPlane {
	c.t.Helper()
	if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), c.kcp); err != nil {
		c.t.Fatal(err)
	}
	return c.kcp
}

// update changes the KairosControlPlane's spec.
func (c *cpCluster) update(mutate func(*controlplanev1.KairosControlPlaneSpec)) {
	c.t.Helper()
	framework.Eventually(c.t, 30*time.Second, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), kcp); err != nil {
			return err
		}
		mutate(&kcp.Spec)
		return c.h.Client.Update(c.ctx, kcp)
	})
}

// annotate sets an annotation of the KairosControlPlane.
func (c *cpCluster) annotate(key, value string) {
	c.t.Helper()
	framework.Eventually(c.t, 30*time.Second, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), kcp); err != nil {
			return err
		}
		kcp.Annotations = labels.Merge(kcp.Annotations, map[string]string{key: value})
		return c.h.Client.Update(c.ctx, kcp)
	})
}

// controlPlaneMachines lists the control-plane Machines, oldest first.
func (c *cpCluster) controlPlaneMachines() ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := c.h.Client.List(c.ctx, list, client.InNamespace(c.key.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel: c.key.Name, controlplanev1.ControlPlaneNameLabel: c.key.Name,
	}); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp)
	})
	return list.Items, nil
}

// waitSettled waits until the control plane has exactly n Machines, all running the version
// with a node and an etcd member, and Cluster API's and the control plane's status say so.
func (c *cpCluster) waitSettled(n int, version string, timeout time.Duration) []clusterv1.Machine {
	c.t.Helper()
	var machines []clusterv1.Machine
	framework.Eventually(c.t, timeout, func() error {
		var err error
		if machines, err = c.controlPlaneMachines(); err != nil {
			return err
		}
		if len(machines) != n {
			return fmt.Errorf("%d control-plane Machines, want %d (%s)", len(machines), n, c.kcpProblems())
		}
		nodes := map[string]bool{}
		for _, m := range machines {
			if !m.DeletionTimestamp.IsZero() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				return fmt.Errorf("machine %s is %s (%s)", m.Name, m.Status.Phase, machineProblems(&m))
			}
			if m.Spec.Version != version {
				return fmt.Errorf("machine %s runs %s, want %s", m.Name, m.Spec.Version, version)
			}
			if !conditions.IsTrue(&m, clusterv1.MachineUpToDateCondition) {
				return fmt.Errorf("machine %s is not UpToDate: %+v", m.Name, conditions.Get(&m, clusterv1.MachineUpToDateCondition))
			}
			nodes[m.Status.NodeRef.Name] = true
		}
		members := c.SimCluster(c.ctx).EtcdMembers() // nil-safe: retried while the cluster cannot be found
		if len(members) != n {
			return fmt.Errorf("%d etcd members %+v, want %d", len(members), members, n)
		}
		for _, mem := range members {
			if !nodes[mem.NodeName] {
				return fmt.Errorf("etcd member %s belongs to node %s, which no Machine has", mem.Name, mem.NodeName)
			}
		}
		kcp := c.get()
		s := kcp.Status
		if ptr.Deref(s.Replicas, -1) != int32(n) || ptr.Deref(s.ReadyReplicas, -1) != int32(n) ||
			ptr.Deref(s.AvailableReplicas, -1) != int32(n) || ptr.Deref(s.UpToDateReplicas, -1) != int32(n) {
			return fmt.Errorf("status replicas %v ready %v available %v upToDate %v, want %d", ptr.Deref(s.Replicas, -1),
				ptr.Deref(s.ReadyReplicas, -1), ptr.Deref(s.AvailableReplicas, -1), ptr.Deref(s.UpToDateReplicas, -1), n)
		}
		if len(s.Versions) != 1 || s.Versions[0].Version != version || s.Versions[0].Replicas != int32(n) || s.Version != version {
			return fmt.Errorf("status versions %+v version %q, want %d at %s", s.Versions, s.Version, n, version)
		}
		if s.ObservedGeneration != kcp.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", s.ObservedGeneration, kcp.Generation)
		}
		for _, typ := range []string{controlplanev1.AvailableCondition, controlplanev1.MachinesReadyCondition, controlplanev1.MachinesUpToDateCondition} {
			if !conditions.IsTrue(kcp, typ) {
				return fmt.Errorf("KairosControlPlane %s is not true: %+v", typ, conditions.Get(kcp, typ))
			}
		}
		for _, typ := range []string{controlplanev1.RollingOutCondition, controlplanev1.ScalingUpCondition, controlplanev1.ScalingDownCondition} {
			if !conditions.IsFalse(kcp, typ) {
				return fmt.Errorf("KairosControlPlane %s is not false: %+v", typ, conditions.Get(kcp, typ))
			}
		}
		return harness.CheckCondition(c.ctx, c.h.Client, c.Cluster, clusterv1.ClusterControlPlaneAvailableCondition, metav1.ConditionTrue, "")
	})
	return machines
}

// kcpProblems summarises the control plane's false conditions for failure messages.
func (c *cpCluster) kcpProblems() string {
	kcp := &controlplanev1.KairosControlPlane{}
	if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), kcp); err != nil {
		return err.Error()
	}
	var out []string
	for _, cond := range kcp.Status.Conditions {
		if cond.Message != "" {
			out = append(out, fmt.Sprintf("%s=%s: %s", cond.Type, cond.Status, cond.Message))
		}
	}
	return strings.Join(out, "; ")
}

// machineCountWatch records the most and fewest control-plane Machines (not being deleted) seen
// while an operation runs, so that a scenario can assert rollouts stay within maxSurge.
type machineCountWatch struct {
	mu       sync.Mutex
	max, min int
	// peak describes the Machines seen when there were most of them, for the failure message.
	peak    string
	stop    context.CancelFunc
	stopped bool
}

func (c *cpCluster) watchMachineCount() *machineCountWatch {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.ctx)
	w := &machineCountWatch{min: 1 << 30, stop: cancel}
	err := c.h.Observe(ctx, &clusterv1.Machine{}, func(objects []client.Object) {
		var machines []clusterv1.Machine
		for _, o := range objects {
			if m := o.(*clusterv1.Machine); c.isControlPlaneMachine(m) {
				machines = append(machines, *m)
			}
		}
		active := 0
		for _, m := range machines {
			if m.DeletionTimestamp.IsZero() {
				active++
			}
		}
		sort.Slice(machines, func(i, j int) bool { return machines[i].CreationTimestamp.Before(&machines[j].CreationTimestamp) })
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		if len(machines) > w.max {
			w.peak = describeMachines(machines)
		}
		w.max, w.min = max(w.max, len(machines)), min(w.min, active)
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

// isControlPlaneMachine says whether m is one of this control plane's Machines.
func (c *cpCluster) isControlPlaneMachine(m *clusterv1.Machine) bool {
	return m.Namespace == c.key.Namespace && m.Labels[clusterv1.ClusterNameLabel] == c.key.Name &&
		m.Labels[controlplanev1.ControlPlaneNameLabel] == c.key.Name
}

func (w *machineCountWatch) result() (most, fewestActive int) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	return w.max, w.min
}

// peakMachines describes the Machines seen at the peak count.
func (w *machineCountWatch) peakMachines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak
}

// describeMachines names each Machine with its version, age, node and deletion state.
func describeMachines(machines []clusterv1.Machine) string {
	var out []string
	for _, m := range machines {
		d := fmt.Sprintf("%s (%s, created %s, uid %s", m.Name, m.Spec.Version, m.CreationTimestamp.UTC().Format(time.TimeOnly), m.UID)
		if m.Status.NodeRef.IsDefined() {
			d += ", node " + m.Status.NodeRef.Name
		}
		if !m.DeletionTimestamp.IsZero() {
			d += ", deleting since " + m.DeletionTimestamp.UTC().Format(time.TimeOnly)
		}
		out = append(out, d+")")
	}
	return strings.Join(out, "; ")
}

// TestControlPlaneWithWorkers: one control-plane Machine and a MachineDeployment of two workers
// reach Running with nodes, and the kubeconfig the control plane writes works.
func TestControlPlaneWithWorkers(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			// Everything the controllers log, up to debug verbosity V(7), is searched for secrets
			// below.
			capture := framework.CaptureLogs()
			defer capture.Stop()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1})
			md, err := c.CreateMachineDeployment(c.ctx, "workers", harness.MachineDeploymentOptions{
				Replicas: 2, Version: version, Config: workerConfig(dist),
			})
			if err != nil {
				t.Fatal(err)
			}
			machines := c.waitSettled(1, version, waitScale)
			t.Logf("control plane available after %s", time.Since(start).Round(time.Second))

			kcp := c.get()
			if !ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false) {
				t.Error("status.initialization.controlPlaneInitialized is not true")
			}
			if !ptr.Deref(c.Cluster.Status.Initialization.ControlPlaneInitialized, false) {
				if err := c.Get(c.ctx); err != nil || !ptr.Deref(c.Cluster.Status.Initialization.ControlPlaneInitialized, false) {
					t.Error("the Cluster does not report the control plane initialized")
				}
			}
			if kcp.Status.Selector == "" || !conditions.IsTrue(kcp, controlplanev1.CertificatesAvailableCondition) || !conditions.IsTrue(kcp, controlplanev1.InitializedCondition) {
				t.Errorf("selector %q, CertificatesAvailable %+v, Initialized %+v", kcp.Status.Selector,
					conditions.Get(kcp, controlplanev1.CertificatesAvailableCondition), conditions.Get(kcp, controlplanev1.InitializedCondition))
			}
			for _, suffix := range []string{"ca", "etcd", "proxy", "sa", "kubeconfig"} {
				s := &corev1.Secret{}
				if err := h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.Cluster.Namespace, Name: c.Cluster.Name + "-" + suffix}, s); err != nil {
					t.Fatalf("cluster secret %s: %v", suffix, err)
				}
				if !metav1.IsControlledBy(s, kcp) || s.Type != clusterv1.ClusterSecretType || s.Labels[clusterv1.ClusterNameLabel] != c.Cluster.Name {
					t.Errorf("secret %s: controlled by the control plane %v, type %s, labels %v", s.Name, metav1.IsControlledBy(s, kcp), s.Type, s.Labels)
				}
			}
			if _, ok := machines[0].Annotations[controlplanev1.EtcdMemberHookAnnotation]; !ok {
				t.Error("the control-plane Machine has no etcd-member pre-terminate hook")
			}

			waitAvailable(t, c.ctx, md, 2)
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, time.Minute, func() error {
				nodes := &corev1.NodeList{}
				if err := wl.List(c.ctx, nodes); err != nil {
					return err
				}
				if len(nodes.Items) != 3 {
					return fmt.Errorf("%d Nodes through <cluster>-kubeconfig, want 3", len(nodes.Items))
				}
				return nil
			})
			// A control-plane node applies its manifests once its kubelet registered (the
			// distribution's applier), so the Nodes can come first.
			framework.Eventually(t, time.Minute, func() error {
				if err := wl.Get(c.ctx, client.ObjectKey{Name: platformNamespace}, &corev1.Namespace{}); err != nil {
					return fmt.Errorf("the control plane's manifest was not applied: %w", err)
				}
				return nil
			})

			// Metadata and deletion timeouts reach the existing Machine (and its KairosConfig)
			// without replacing it.
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.MachineTemplate.ObjectMeta.Labels = map[string]string{"team": "platform"}
				s.MachineTemplate.Spec.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](30)
			})
			framework.Eventually(t, time.Minute, func() error {
				m := &clusterv1.Machine{}
				if err := h.Client.Get(c.ctx, client.ObjectKeyFromObject(&machines[0]), m); err != nil {
					return err
				}
				if m.Labels["team"] != "platform" || ptr.Deref(m.Spec.Deletion.NodeDrainTimeoutSeconds, 0) != 30 {
					return fmt.Errorf("machine labels %v, drain timeout %v", m.Labels, m.Spec.Deletion.NodeDrainTimeoutSeconds)
				}
				config := &bootstrapv1.KairosConfig{}
				if err := h.Client.Get(c.ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, config); err != nil {
					return err
				}
				if config.Labels["team"] != "platform" {
					return fmt.Errorf("KairosConfig labels %v", config.Labels)
				}
				return nil
			})
			c.waitSettled(1, version, time.Minute)
			if now, err := c.controlPlaneMachines(); err != nil || len(now) != 1 || now[0].Name != machines[0].Name {
				t.Errorf("metadata propagation replaced the Machine: %v %v", now, err)
			}

			// No key, token or password reached a log line, an Event or a condition.
			needles := secretNeedles(c.ctx, t, c.Cluster.Namespace, wl, testPassword)
			assertNoSecretMaterial(c.ctx, t, c.Cluster.Namespace, wl, needles, capture.Stop())
			t.Logf("%s scenario checked after %s", dist, time.Since(start).Round(time.Second))
		})
	}
}

// TestHAScaleUpAndDown: three control-plane Machines spread over three failure domains, then
// scaled to five and back to three with `kubectl scale`; members leave etcd before their
// Machines go.
func TestHAScaleUpAndDown(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 3, failureDomains: []string{"fd-a", "fd-b", "fd-c"}})
			machines := c.waitSettled(3, version, waitScale)
			t.Logf("HA control plane of 3 available after %s", time.Since(start).Round(time.Second))
			domains := map[string]bool{}
			for _, m := range machines {
				domains[m.Spec.FailureDomain] = true
			}
			if len(domains) != 3 || domains[""] {
				t.Errorf("control-plane Machines are not spread over the 3 failure domains: %v", domains)
			}

			c.scale(5)
			c.waitSettled(5, version, waitScale)
			t.Logf("scaled to 5 after %s", time.Since(start).Round(time.Second))
			c.scale(3)
			c.waitSettled(3, version, waitScale)
			t.Logf("scaled back to 3 after %s", time.Since(start).Round(time.Second))
		})
	}
}

// scale changes the replicas through the scale subresource, as `kubectl scale` does: a merge
// patch without a resourceVersion, which a status update of the control plane in between cannot
// turn into a conflict (a read and an update of the Scale could, and did).
func (c *cpCluster) scale(n int32) {
	c.t.Helper()
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
	if err := c.h.Client.SubResource("scale").Patch(c.ctx, c.kcp, patch, client.WithSubResourceBody(&autoscalingv1.Scale{})); err != nil {
		c.t.Fatal(err)
	}
}

// TestRollout: a version change replaces every control-plane Machine one at a time, first
// with maxSurge 1 (never more than replicas+1 Machines) and then with maxSurge 0 (never more
// than replicas).
//
// It also proves that in-place updates leave a rollout they cannot do alone (issue 20, f). The
// suite runs Cluster API with the InPlaceUpdates gate on, so the first rollout, in a namespace
// the Kairos update extension does not serve, is the classic rollout of a control plane without
// the extension (which tryInPlaceUpdate treats exactly as one without the gate). Before the
// second, the namespace opts in, and the change names a new infrastructure template (a new VM
// image shipping the next version): the extension refuses infrastructure changes, so every
// Machine is still replaced, and RollingOut says why it was not updated in place.
func TestRollout(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 3, version: oldVersion})
			before := c.waitSettled(3, oldVersion, waitScale)

			w := c.watchMachineCount()
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = version })
			framework.Eventually(t, 30*time.Second, func() error {
				if !conditions.IsTrue(c.get(), controlplanev1.RollingOutCondition) {
					return fmt.Errorf("RollingOut is %+v", conditions.Get(c.kcp, controlplanev1.RollingOutCondition))
				}
				return nil
			})
			after := c.waitSettled(3, version, 2*waitScale)
			most, fewest := w.result()
			t.Logf("rolled out to %s with maxSurge 1 after %s (at most %d Machines, at least %d active)", version, time.Since(start).Round(time.Second), most, fewest)
			if most > 4 || fewest < 3 {
				t.Errorf("maxSurge 1 rollout had up to %d Machines and down to %d active, want 4 and 3; at the peak: %s", most, fewest, w.peakMachines())
			}
			assertReplaced(t, before, after)

			const next = "v1.37.0"
			if err := c.h.OptIntoInPlaceUpdates(c.ctx, c.key.Namespace); err != nil {
				t.Fatal(err)
			}
			installed := next + "+k0s.0"
			if dist == bootstrapv1.DistributionK3s {
				installed = next + "+k3s1"
			}
			image := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: c.key.Namespace, Name: c.key.Name + "-cp-next"},
				Spec: infrav1.KairosSimMachineTemplateSpec{Template: infrav1.KairosSimMachineTemplateResource{Spec: infrav1.KairosSimMachineSpec{InstalledVersion: installed}}}}
			if err := c.h.Client.Create(c.ctx, image); err != nil {
				t.Fatal(err)
			}
			w = c.watchMachineCount()
			notInPlace := c.watchCondition(controlplanev1.RollingOutCondition, func(cond *metav1.Condition) bool {
				return cond != nil && strings.Contains(cond.Message, "not updating it in place")
			})
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Version = next
				s.MachineTemplate.Spec.InfrastructureRef.Name = image.Name
				s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
			})
			final := c.waitSettled(3, next, 2*waitScale)
			most, fewest = w.result()
			t.Logf("rolled out to %s and a new infrastructure template with maxSurge 0 after %s (at most %d Machines, at least %d active)", next, time.Since(start).Round(time.Second), most, fewest)
			if most > 3 || fewest < 2 {
				t.Errorf("maxSurge 0 rollout had up to %d Machines and down to %d active, want 3 and 2; at the peak: %s", most, fewest, w.peakMachines())
			}
			assertReplaced(t, after, final)
			// Each of the three Machines was refused by the extension for its infrastructure.
			said := map[string]bool{}
			for _, st := range notInPlace.result() {
				for _, m := range after {
					if strings.Contains(st, "replacing Machine "+m.Name+", not updating it in place: ") && strings.Contains(st, "infrastructure changes need a new Machine") {
						said[m.Name] = true
					}
				}
			}
			if len(said) != len(after) {
				t.Errorf("RollingOut said why the Machines were not updated in place for %d of %d (%v)", len(said), len(after), said)
			}
			for _, m := range final {
				sm := &infrav1.KairosSimMachine{}
				if err := c.h.Client.Get(c.ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}, sm); err != nil {
					t.Fatal(err)
				}
				if from := sm.Annotations[clusterv1.TemplateClonedFromNameAnnotation]; from != image.Name {
					t.Errorf("the infrastructure machine of %s was cloned from %q, want %s", m.Name, from, image.Name)
				}
			}
		})
	}
}

// assertReplaced checks that no Machine of before is still there.
func assertReplaced(t *testing.T, before, after []clusterv1.Machine) {
	t.Helper()
	old := map[string]bool{}
	for _, m := range before {
		old[m.Name] = true
	}
	for _, m := range after {
		if old[m.Name] {
			t.Errorf("machine %s was not replaced", m.Name)
		}
	}
}

// TestRemediation: a MachineHealthCheck marks a control-plane Machine whose node stopped being
// ready; the control plane removes its etcd member, deletes it and creates a replacement. k0s
// only: the remediation rules are the reconciler's (TestReconcileRemediation), and a k3s
// control plane is remediated through a MachineHealthCheck, its members leaving through the
// k3s annotation, in TestTwoUnhealthyMachinesRecover/k3s (twice) and
// TestEtcdPartitionAndPowerOff/k3s.
func TestRemediation(t *testing.T) {
	t.Parallel()
	for _, dist := range []bootstrapv1.Distribution{bootstrapv1.DistributionK0s} {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 3})
			machines := c.waitSettled(3, version, waitScale)
			c.createHealthCheck(corev1.ConditionFalse)

			victim := machines[1]
			node := c.Node(victim.Spec.InfrastructureRef.Name)
			if node == nil {
				t.Fatalf("no simulated node for %s", victim.Name)
			}
			if err := node.SetReady(c.ctx, false, ""); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 2*time.Minute, func() error {
				if c.get().Status.LastRemediation.Machine != victim.Name {
					return fmt.Errorf("lastRemediation %+v (%s)", c.kcp.Status.LastRemediation, c.kcpProblems())
				}
				return nil
			})
			after := c.waitSettled(3, version, waitScale)
			for _, m := range after {
				if m.Name == victim.Name {
					t.Fatalf("unhealthy Machine %s is still there", victim.Name)
				}
			}
			newest := after[len(after)-1]
			if _, ok := newest.Annotations[controlplanev1.RemediationForAnnotation]; !ok {
				t.Errorf("replacement %s does not record the remediation it is part of", newest.Name)
			}
			framework.Eventually(t, 30*time.Second, func() error {
				return harness.CheckCondition(c.ctx, h.Client, c.kcp, controlplanev1.RemediatingCondition, metav1.ConditionFalse, "")
			})
			t.Logf("remediated %s after %s", victim.Name, time.Since(start).Round(time.Second))
		})
	}
}

// TestPauseAndResume: a paused Cluster's control plane does nothing until it is resumed. k0s
// only: pausing does not depend on the distribution (TestReconcilePaused proves the rule for the
// reconciler), and the scale-up after resuming joins controllers as TestHAScaleUpAndDown does
// for both.
func TestPauseAndResume(t *testing.T) {
	slots.Parallel(t)
	for _, dist := range []bootstrapv1.Distribution{bootstrapv1.DistributionK0s} {
		t.Run(string(dist), func(t *testing.T) {
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1})
			c.waitSettled(1, version, waitScale)
			c.setPaused(true)
			framework.Eventually(t, 30*time.Second, func() error {
				return harness.CheckCondition(c.ctx, h.Client, c.kcp, clusterv1.PausedCondition, metav1.ConditionTrue, "")
			})
			c.scale(3)
			framework.Consistently(t, 8*time.Second, func() error {
				machines, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(machines) != 1 {
					return fmt.Errorf("%d Machines while paused", len(machines))
				}
				return nil
			})
			c.setPaused(false)
			c.waitSettled(3, version, waitScale)
			if conditions.IsTrue(c.get(), clusterv1.PausedCondition) {
				t.Error("Paused stays true after resuming")
			}
		})
	}
}

func (c *cpCluster) setPaused(paused bool) {
	c.t.Helper()
	framework.Eventually(c.t, 30*time.Second, func() error {
		cluster := &clusterv1.Cluster{}
		if err := c.h.Client.Get(c.ctx, c.Key(), cluster); err != nil {
			return err
		}
		cluster.Spec.Paused = ptr.To(paused)
		return c.h.Client.Update(c.ctx, cluster)
	})
}

// TestDeleteCluster: deleting the Cluster removes the workers first, then the control plane.
func TestDeleteCluster(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// The distributions run side by side: their clusters share nothing but the harness.
			slots.Parallel(t)
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1})
			if _, err := c.CreateMachineDeployment(c.ctx, "workers", harness.MachineDeploymentOptions{
				Replicas: 1, Version: version, Config: workerConfig(dist),
			}); err != nil {
				t.Fatal(err)
			}
			c.waitSettled(1, version, waitScale)
			framework.Eventually(t, waitMachines, func() error {
				all, err := c.Machines(c.ctx)
				if err != nil {
					return err
				}
				for _, m := range all {
					if !m.Status.NodeRef.IsDefined() {
						return fmt.Errorf("machine %s has no node", m.Name)
					}
				}
				if len(all) != 2 {
					return fmt.Errorf("%d Machines, want 2", len(all))
				}
				return nil
			})

			// Record whether a control-plane Machine starts deleting while a worker exists.
			var order sync.Mutex
			violation := ""
			watch, stopWatch := context.WithCancel(c.ctx)
			err := h.Observe(watch, &clusterv1.Machine{}, func(objects []client.Object) {
				workers, cpDeleting := 0, ""
				for _, o := range objects {
					m := o.(*clusterv1.Machine)
					if m.Namespace != c.key.Namespace || m.Labels[clusterv1.ClusterNameLabel] != c.key.Name {
						continue
					}
					if !hasLabel(m, clusterv1.MachineControlPlaneLabel) {
						workers++
					} else if !m.DeletionTimestamp.IsZero() {
						cpDeleting = m.Name
					}
				}
				if workers > 0 && cpDeleting != "" {
					order.Lock()
					violation = fmt.Sprintf("control-plane Machine %s deleting while %d worker(s) exist", cpDeleting, workers)
					order.Unlock()
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(c.ctx, 3*time.Minute); err != nil {
				t.Fatal(err)
			}
			stopWatch()
			order.Lock()
			if violation != "" {
				t.Error(violation)
			}
			order.Unlock()
			left, err := c.Machines(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("%d Machines left after the Cluster was deleted", len(left))
			}
			err = h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), &controlplanev1.KairosControlPlane{})
			if err == nil {
				t.Error("the KairosControlPlane is still there")
			}
			// Nothing the cluster owned is left: its Secrets (CA keys, bootstrap data, tokens,
			// kubeconfig), KairosConfigs and infrastructure objects go with it, through owner
			// references and the garbage collector, as in a real management cluster.
			if err := framework.Poll(time.Minute, func() error { return leftovers(c.ctx, c.Cluster.Namespace) }); err != nil {
				t.Errorf("%v\ngarbage collector: %s", err, h.GarbageCollectorState())
			}
		})
	}
}

// leftovers lists the objects of a namespace that a deleted cluster left behind.
func leftovers(ctx context.Context, namespace string) error {
	var left []string
	for _, list := range []client.ObjectList{
		&corev1.SecretList{}, &bootstrapv1.KairosConfigList{}, &bootstrapv1.KairosConfigTemplateList{},
		&infrav1.KairosSimMachineList{}, &infrav1.KairosSimMachineTemplateList{}, &infrav1.KairosSimClusterList{},
		&controlplanev1.KairosControlPlaneList{}, &clusterv1.MachineList{}, &clusterv1.MachineSetList{},
	} {
		if err := h.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return err
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			obj := o.(client.Object)
			var owners []string
			for _, ref := range obj.GetOwnerReferences() {
				owners = append(owners, ref.Kind+"/"+ref.Name+"/"+string(ref.UID))
			}
			left = append(left, fmt.Sprintf("%T %s (owners %v, deleting %v)", o, obj.GetName(), owners, !obj.GetDeletionTimestamp().IsZero()))
			return nil
		}); err != nil {
			return err
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	return nil
}

func hasLabel(m *clusterv1.Machine, key string) bool {
	_, ok := m.Labels[key]
	return ok
}

// TestRestartMidRollout: the managers restart in the middle of a rollout; the new processes
// pick up where the old ones were, without creating extra Machines. It restarts its manager, so
// it has a management cluster of its own and runs beside the other scenarios; its distributions
// run one after the other, each restarting that manager while the other waits.
func TestRestartMidRollout(t *testing.T) {
	slots.Parallel(t)
	opts, err := controlPlaneHarnessOptions()
	if err != nil {
		t.Fatal(err)
	}
	h := harness.Start(t, opts)
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			c := newControlPlaneCluster(t, dist, cpOptions{mgmt: h, replicas: 3, version: oldVersion})
			c.waitSettled(3, oldVersion, waitScale)

			w := c.watchMachineCount()
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) { s.Version = version })
			framework.Eventually(t, time.Minute, func() error {
				machines, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(machines) < 4 {
					return fmt.Errorf("%d Machines, waiting for the surge Machine", len(machines))
				}
				return nil
			})
			if err := h.RestartManager(); err != nil {
				t.Fatal(err)
			}
			c.waitSettled(3, version, 2*waitScale)
			if most, _ := w.result(); most > 4 {
				t.Errorf("up to %d Machines across the restart, want at most 4; at the peak: %s", most, w.peakMachines())
			}

			// A restart with nothing to do rolls nothing.
			settled, err := c.controlPlaneMachines()
			if err != nil {
				t.Fatal(err)
			}
			if err := h.RestartManager(); err != nil {
				t.Fatal(err)
			}
			framework.Consistently(t, 10*time.Second, func() error {
				now, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(now) != len(settled) {
					return fmt.Errorf("%d Machines after an idle restart, want %d", len(now), len(settled))
				}
				for i := range now {
					if now[i].Name != settled[i].Name || !now[i].DeletionTimestamp.IsZero() {
						return fmt.Errorf("machine %s changed after an idle restart", settled[i].Name)
					}
				}
				return nil
			})
		})
	}
}

// TestKubeconfigRotation: a kubeconfig whose client certificate is about to expire is replaced
// with a fresh one that still works.
func TestKubeconfigRotation(t *testing.T) {
	t.Parallel()
	// One distribution: the kubeconfig is the management cluster's (signed with <cluster>-ca,
	// rotated by the control plane), and both distributions' API servers check it the same way.
	// The rotation rules themselves are unit tests (kairoscontrolplane TestReconcileKubeconfig*).
	for _, dist := range []bootstrapv1.Distribution{bootstrapv1.DistributionK0s} {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Kubeconfig.ClientCertificateValiditySeconds = ptr.To[int32](3600)
			}})
			c.waitSettled(1, version, waitScale)
			key := client.ObjectKey{Namespace: c.Cluster.Namespace, Name: c.Cluster.Name + "-kubeconfig"}
			secret := &corev1.Secret{}
			if err := h.Client.Get(c.ctx, key, secret); err != nil {
				t.Fatal(err)
			}
			notAfter := clientCertNotAfter(t, secret.Data["value"])
			if d := time.Until(notAfter); d > time.Hour+time.Minute || d < 50*time.Minute {
				t.Errorf("client certificate valid for %s, want about an hour", d.Round(time.Minute))
			}

			// Replace the client certificate with one that expires in ten minutes, well inside
			// the last third of its lifetime, as if the kubeconfig had aged.
			ca := &corev1.Secret{}
			if err := h.Client.Get(c.ctx, client.ObjectKey{Namespace: c.Cluster.Namespace, Name: c.Cluster.Name + "-ca"}, ca); err != nil {
				t.Fatal(err)
			}
			caPair := &pki.KeyPair{Cert: ca.Data["tls.crt"], Key: ca.Data["tls.key"]}
			aged, err := caPair.SignClient("kairos-capi-admin", []string{"system:masters"}, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(secret.Data["value"])
			if err != nil {
				t.Fatal(err)
			}
			for _, auth := range cfg.AuthInfos {
				auth.ClientCertificateData, auth.ClientKeyData = aged.Cert, aged.Key
			}
			data, err := clientcmd.Write(*cfg)
			if err != nil {
				t.Fatal(err)
			}
			secret.Data["value"] = data
			if err := h.Client.Update(c.ctx, secret); err != nil {
				t.Fatal(err)
			}
			// Nudge a reconcile: the control plane does not watch its kubeconfig Secret.
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Kubeconfig.ObjectMeta.Labels = map[string]string{"rotated": "please"}
			})
			framework.Eventually(t, time.Minute, func() error {
				s := &corev1.Secret{}
				if err := h.Client.Get(c.ctx, key, s); err != nil {
					return err
				}
				if got := clientCertNotAfter(t, s.Data["value"]); time.Until(got) < 50*time.Minute {
					return fmt.Errorf("client certificate still expires at %s", got)
				}
				return nil
			})
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := wl.List(c.ctx, &corev1.NodeList{}); err != nil {
				t.Errorf("the rotated kubeconfig does not work: %v", err)
			}
		})
	}
}

func clientCertNotAfter(t *testing.T, kubeconfig []byte) time.Time {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		notAfter, err := pki.CertificateNotAfter(auth.ClientCertificateData)
		if err != nil {
			t.Fatal(err)
		}
		return notAfter
	}
	t.Fatal("kubeconfig has no client certificate")
	return time.Time{}
}

// waitAvailable waits until a MachineDeployment has n available replicas.
func waitAvailable(t *testing.T, ctx context.Context, md *clusterv1.MachineDeployment, n int32) {
	t.Helper()
	framework.Eventually(t, waitMachines, func() error {
		if err := h.Client.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
			return err
		}
		if got := ptr.Deref(md.Status.AvailableReplicas, 0); got != n {
			return fmt.Errorf("MachineDeployment %s available %d, want %d", md.Name, got, n)
		}
		return nil
	})
}
