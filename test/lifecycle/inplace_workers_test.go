package lifecycle

import (
	"context"
	"fmt"
	"sort"
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

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
)

// TestWorkersUpgradeInPlace (issue 20, c): a MachineDeployment's two workers move to the next
// minor version and Kairos image in place, through Cluster API's MachineDeployment and MachineSet
// controllers (CanUpdateMachineSet, then each Machine moved to the new MachineSet and updated
// through UpdateMachine), within maxUnavailable 1 and without surge: no worker Machine is created
// or deleted, never more than one is updating or unavailable at once, the Nodes keep their names
// and provider IDs, and the nodes run the new image.
//
// The control plane is a single node that already runs the new version: workers may be older
// than the control plane, not newer (Cluster API's MachineSet preflight checks and Kubernetes'
// skew policy), and upgrading the control plane first is TestSingleNodeUpgradesInPlace's job.
//
// Both distributions: each brings a worker back after its reboot as the same Node its own way
// (a k3s agent with the node password that stays on the node, a k0s worker with the kubelet
// credentials under its data directory), and neither may come back as a new node.
func TestWorkersUpgradeInPlace(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			start := time.Now()
			c := newControlPlaneCluster(t, dist, cpOptions{inPlace: true, replicas: 1, version: inPlaceVersion, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Image = kairosImage(dist, inPlaceVersion)
			}})
			// The workers' version is written as their kubelet reports it (README, "Versions"):
			// Cluster API v1.14's Machine controller keeps a MachineSet's Machine UpToDate=False
			// while Node.status.nodeInfo.kubeletVersion differs from spec.version, compared as
			// strings, so v1.36.3 against k3s' v1.36.3+k3s1 would never be up to date, before or
			// after an update.
			from, to := workerVersion(dist, version), workerVersion(dist, inPlaceVersion)
			config := workerConfig(dist)
			config.Image = kairosImage(dist, version)
			md, err := c.CreateMachineDeployment(c.ctx, "workers", harness.MachineDeploymentOptions{
				Replicas: 2, Version: from, Config: config,
			})
			if err != nil {
				t.Fatal(err)
			}
			c.waitSettled(1, inPlaceVersion, waitScale)
			before := c.waitWorkersSettled(md, 2, from, waitScale)
			t.Logf("control plane and workers available after %s", time.Since(start).Round(time.Second))
			if err := c.simCluster().InstallKairosOperator(c.ctx); err != nil {
				t.Fatal(err)
			}
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
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

			w := c.watchWorkers(md.Name)
			next := config
			next.Image = kairosImage(dist, inPlaceVersion)
			tmpl := &bootstrapv1.KairosConfigTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name + "-next", Labels: map[string]string{clusterv1.ClusterNameLabel: c.Cluster.Name}},
				Spec:       bootstrapv1.KairosConfigTemplateSpec{Template: bootstrapv1.KairosConfigTemplateResource{Spec: next}},
			}
			if err := c.h.Client.Create(c.ctx, tmpl); err != nil {
				t.Fatal(err)
			}
			updateStart := time.Now()
			framework.Eventually(t, 30*time.Second, func() error {
				if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(md), md); err != nil {
					return err
				}
				md.Spec.Template.Spec.Version = to
				md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = tmpl.Name
				// One worker at a time, and none more than two: a rollout that may not create a
				// Machine can only update in place.
				md.Spec.Rollout.Strategy = clusterv1.MachineDeploymentRolloutStrategy{
					Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
						MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					},
				}
				return c.h.Client.Update(c.ctx, md)
			})
			after := c.waitWorkersSettled(md, 2, to, 2*waitScale)
			t.Logf("workers upgraded in place in %s (%s in all)", time.Since(updateStart).Round(time.Second), time.Since(start).Round(time.Second))
			r := w.result()

			if r.most != 2 || r.fewest != 2 || len(r.uids) != 2 {
				t.Errorf("worker Machines were created or deleted: up to %d and down to %d, %d Machines seen (%v)", r.most, r.fewest, len(r.uids), r.uids)
			}
			for _, m := range before {
				if !r.uids[string(m.UID)] {
					t.Errorf("worker Machine %s (uid %s) is gone", m.Name, m.UID)
				}
			}
			t.Logf("at most %d worker(s) updating or unavailable at once: %s", r.mostDown, r.mostDownAt)
			if r.mostDown > 1 {
				t.Errorf("%d workers updating or unavailable at once (maxUnavailable 1): %s", r.mostDown, r.mostDownAt)
			}
			if len(r.updated) != 2 {
				t.Errorf("workers seen updating: %v, want both", r.updated)
			}
			for _, m := range after {
				n := corev1.Node{}
				if err := wl.Get(c.ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, &n); err != nil {
					t.Fatal(err)
				}
				was, ok := nodesBefore[m.Name]
				if !ok || n.Name != was.Name || n.UID != was.UID || n.Spec.ProviderID != was.Spec.ProviderID || m.Spec.ProviderID != was.Spec.ProviderID {
					t.Errorf("Node of worker Machine %s: %s uid %s providerID %q, was %s uid %s providerID %q",
						m.Name, n.Name, n.UID, n.Spec.ProviderID, was.Name, was.UID, was.Spec.ProviderID)
				}
				if running := c.nodeOf(m).RunningImage(); running != next.Image {
					t.Errorf("the node of worker Machine %s runs image %s, want %s", m.Name, running, next.Image)
				}
				if n.Status.NodeInfo.KubeletVersion != to {
					t.Errorf("the Node of worker Machine %s reports kubelet %s, want %s", m.Name, n.Status.NodeInfo.KubeletVersion, to)
				}
				cfg := &bootstrapv1.KairosConfig{}
				if err := c.h.Client.Get(c.ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.Bootstrap.ConfigRef.Name}, cfg); err != nil {
					t.Fatal(err)
				}
				if cfg.Spec.Image != next.Image {
					t.Errorf("KairosConfig %s of worker Machine %s asks for image %q, want %q", cfg.Name, m.Name, cfg.Spec.Image, next.Image)
				}
			}
		})
	}
}

// workerVersion is a Kubernetes version as the kubelet of the distribution reports it: k3s
// v1.36.3+k3s1, k0s v1.36.3+k0s (its releases are v1.36.3+k0s.N).
func workerVersion(dist bootstrapv1.Distribution, v string) string {
	if dist == bootstrapv1.DistributionK0s {
		return v + "+k0s"
	}
	return v + "+k3s1"
}

// workerMachines lists the Machines of a MachineDeployment, by name.
func (c *cpCluster) workerMachines(md string) []clusterv1.Machine {
	c.t.Helper()
	list := &clusterv1.MachineList{}
	if err := c.h.Client.List(c.ctx, list, client.InNamespace(c.key.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel: c.key.Name, clusterv1.MachineDeploymentNameLabel: md,
	}); err != nil {
		c.t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// waitWorkersSettled waits until a MachineDeployment has n Machines, all at version, up to date,
// available and no longer updating, and its status says the rollout is done.
func (c *cpCluster) waitWorkersSettled(md *clusterv1.MachineDeployment, n int, version string, timeout time.Duration) []clusterv1.Machine {
	c.t.Helper()
	var machines []clusterv1.Machine
	framework.Eventually(c.t, timeout, func() error {
		machines = c.workerMachines(md.Name)
		if len(machines) != n {
			return fmt.Errorf("%d worker Machines, want %d", len(machines), n)
		}
		for _, m := range machines {
			switch {
			case m.Spec.Version != version:
				return fmt.Errorf("worker Machine %s runs %s, want %s", m.Name, m.Spec.Version, version)
			case machineUpdating(&m):
				return fmt.Errorf("worker Machine %s is updating: %+v", m.Name, conditions.Get(&m, clusterv1.MachineUpdatingCondition))
			case !conditions.IsTrue(&m, clusterv1.MachineUpToDateCondition):
				return fmt.Errorf("worker Machine %s is not UpToDate: %+v", m.Name, conditions.Get(&m, clusterv1.MachineUpToDateCondition))
			case !conditions.IsTrue(&m, clusterv1.MachineAvailableCondition) || !m.Status.NodeRef.IsDefined():
				return fmt.Errorf("worker Machine %s is not available: %+v", m.Name, conditions.Get(&m, clusterv1.MachineAvailableCondition))
			}
		}
		if err := c.h.Client.Get(c.ctx, client.ObjectKeyFromObject(md), md); err != nil {
			return err
		}
		s := md.Status
		if ptr.Deref(s.UpToDateReplicas, -1) != int32(n) || ptr.Deref(s.AvailableReplicas, -1) != int32(n) || ptr.Deref(s.Replicas, -1) != int32(n) {
			return fmt.Errorf("MachineDeployment replicas %v available %v upToDate %v, want %d",
				ptr.Deref(s.Replicas, -1), ptr.Deref(s.AvailableReplicas, -1), ptr.Deref(s.UpToDateReplicas, -1), n)
		}
		if conditions.IsTrue(md, clusterv1.MachineDeploymentRollingOutCondition) {
			return fmt.Errorf("MachineDeployment still rolling out: %s", conditions.Get(md, clusterv1.MachineDeploymentRollingOutCondition).Message)
		}
		return nil
	})
	return machines
}

// workerWatch records, while a MachineDeployment rolls out, the most and fewest of its Machines
// (not being deleted), every Machine it ever had, the most that were updating in place or
// unavailable at once (what maxUnavailable bounds), and the Machines seen updating.
type workerWatch struct {
	mu                 sync.Mutex
	most, fewest       int
	uids               map[string]bool
	mostDown           int
	mostDownAt         string
	updated            map[string]bool
	stop               context.CancelFunc
	stopped            bool
	namespace, md, cls string
}

type workerWatchResult struct {
	most, fewest, mostDown int
	mostDownAt             string
	uids                   map[string]bool
	updated                []string
}

func (c *cpCluster) watchWorkers(md string) *workerWatch {
	c.t.Helper()
	ctx, cancel := context.WithCancel(c.ctx)
	w := &workerWatch{fewest: 1 << 30, uids: map[string]bool{}, updated: map[string]bool{}, stop: cancel, namespace: c.key.Namespace, md: md, cls: c.key.Name}
	err := c.h.Observe(ctx, &clusterv1.Machine{}, func(objects []client.Object) {
		active := 0
		var down []string
		uids := map[string]string{}
		var updating []string
		for _, o := range objects {
			m := o.(*clusterv1.Machine)
			if m.Namespace != w.namespace || m.Labels[clusterv1.ClusterNameLabel] != w.cls || m.Labels[clusterv1.MachineDeploymentNameLabel] != w.md {
				continue
			}
			uids[string(m.UID)] = m.Name
			if !m.DeletionTimestamp.IsZero() {
				continue
			}
			active++
			updatingNow := machineUpdating(m)
			if updatingNow {
				updating = append(updating, m.Name)
			}
			if updatingNow || !conditions.IsTrue(m, clusterv1.MachineAvailableCondition) {
				down = append(down, fmt.Sprintf("%s (updating %v, Available %+v)", m.Name, updatingNow, conditions.Get(m, clusterv1.MachineAvailableCondition)))
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stopped {
			return
		}
		for uid := range uids {
			w.uids[uid] = true
		}
		for _, n := range updating {
			w.updated[n] = true
		}
		w.most, w.fewest = max(w.most, active), min(w.fewest, active)
		if len(down) > w.mostDown {
			w.mostDown, w.mostDownAt = len(down), strings.Join(down, "; ")
		}
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

func (w *workerWatch) result() workerWatchResult {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	r := workerWatchResult{most: w.most, fewest: w.fewest, mostDown: w.mostDown, mostDownAt: w.mostDownAt, uids: w.uids}
	for n := range w.updated {
		r.updated = append(r.updated, n)
	}
	sort.Strings(r.updated)
	return r
}
