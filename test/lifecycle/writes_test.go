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
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// controlPlaneWrites records every write the KairosControlPlane controller makes to the
// management cluster (its client is wrapped in the suite's Setup).
var controlPlaneWrites = &writeLog{}

// anyNamespace marks a write whose namespace is not known.
const anyNamespace = "*"

// writeLog is a list of writes, "verb Kind namespace/name".
type writeLog struct {
	mu     sync.Mutex
	writes []recordedWrite
}

type recordedWrite struct {
	at                   time.Time
	verb, kind, ns, name string
}

func (l *writeLog) add(c client.Client, verb string, obj client.Object) {
	kind := fmt.Sprintf("%T", obj)
	if gvk, err := apiutil.GVKForObject(obj, c.Scheme()); err == nil {
		kind = gvk.Kind
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, recordedWrite{at: time.Now(), verb: verb, kind: kind, ns: obj.GetNamespace(), name: obj.GetName()})
}

// since returns the writes in namespace after t.
func (l *writeLog) since(namespace string, t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, w := range l.writes {
		if (w.ns == namespace || w.ns == anyNamespace) && w.at.After(t) {
			out = append(out, fmt.Sprintf("%s %s %s", w.verb, w.kind, w.name))
		}
	}
	return out
}

// countingClient records the writes made through it.
type countingClient struct {
	client.Client
	log *writeLog
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.log.add(c.Client, "create", obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.log.add(c.Client, "update", obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.log.add(c.Client, "patch", obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Apply is counted in the namespace of an apply configuration that says its own (the control
// plane applies unstructured ones, which do), and in every namespace otherwise.
func (c countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	w := recordedWrite{at: time.Now(), verb: "apply", kind: fmt.Sprintf("%T", obj), ns: anyNamespace}
	if u, ok := obj.(interface {
		GetKind() string
		GetNamespace() string
		GetName() string
	}); ok {
		w.kind, w.ns, w.name = u.GetKind(), u.GetNamespace(), u.GetName()
	}
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, w)
	c.log.mu.Unlock()
	return c.Client.Apply(ctx, obj, opts...)
}

func (c countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.log.add(c.Client, "delete", obj)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c countingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.log.add(c.Client, "deletecollection", obj)
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c countingClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c countingClient) SubResource(sub string) client.SubResourceClient {
	return countingSubResource{SubResourceClient: c.Client.SubResource(sub), c: c.Client, log: c.log, sub: sub}
}

type countingSubResource struct {
	client.SubResourceClient
	c   client.Client
	log *writeLog
	sub string
}

func (s countingSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	s.log.add(s.c, "create/"+s.sub, obj)
	return s.SubResourceClient.Create(ctx, obj, sub, opts...)
}

func (s countingSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.log.add(s.c, "update/"+s.sub, obj)
	return s.SubResourceClient.Update(ctx, obj, opts...)
}

func (s countingSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.log.add(s.c, "patch/"+s.sub, obj)
	return s.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

// TestSteadyControlPlaneWritesNothing: once a control plane has settled, its reconciles (the
// periodic etcd health checks, every 5 s in this suite, and changes that concern nothing it
// manages) write nothing to the management cluster.
//
// Then, on the same single-node cluster, issue 34's scenario (d): without etcd snapshots the
// last control-plane Machine is not remediated, as before snapshots existed (and as Cluster
// API's KubeadmControlPlane does): a MachineHealthCheck marks it unhealthy (its Node not Ready),
// the control plane's Remediating condition says why it does not replace it, and the Machine
// stays, alone and not deleting.
func TestSteadyControlPlaneWritesNothing(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			// Each counts the writes in its own namespace only, so the distributions (and the
			// other scenarios) run side by side.
			slots.Parallel(t)
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1})
			only := c.waitSettled(1, version, waitScale)[0]
			ns := c.Cluster.Namespace
			if len(controlPlaneWrites.since(ns, time.Time{})) == 0 {
				t.Fatal("no write of the control plane was counted while it created its Machine: the counting client is not in use")
			}
			// Settled means no write for a while: Machine and node conditions take a few
			// reconciles to arrive.
			var quietSince time.Time
			framework.Eventually(t, 2*time.Minute, func() error {
				quietSince = time.Now().Add(-15 * time.Second)
				if w := controlPlaneWrites.since(ns, quietSince); len(w) > 0 {
					return fmt.Errorf("the control plane still writes: %v", w)
				}
				return nil
			})
			start := time.Now()
			// A change of the KairosControlPlane that asks for nothing (an annotation) makes it
			// reconcile, as do the periodic etcd health checks.
			for i := range 3 {
				kcp := &controlplanev1.KairosControlPlane{}
				if err := h.Client.Get(c.ctx, client.ObjectKeyFromObject(c.kcp), kcp); err != nil {
					t.Fatal(err)
				}
				patch := client.MergeFrom(kcp.DeepCopy())
				metav1.SetMetaDataAnnotation(&kcp.ObjectMeta, "test.kairos.io/poke", fmt.Sprint(i))
				if err := h.Client.Patch(c.ctx, kcp, patch); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Second)
			}
			if w := controlPlaneWrites.since(ns, start); len(w) > 0 {
				t.Errorf("a steady control plane wrote %d times in %s: %s", len(w), time.Since(start).Round(time.Second), strings.Join(w, ", "))
			}

			// Issue 34 (d): the only Machine, unhealthy, without snapshots.
			unhealthy := time.Now()
			c.createHealthCheck(corev1.ConditionFalse)
			if err := c.nodeOf(only).SetReady(c.ctx, false, ""); err != nil {
				t.Fatal(err)
			}
			c.waitCondition(controlplanev1.RemediatingCondition, metav1.ConditionTrue, "Machine "+only.Name+" is the only control-plane Machine: replacing it would lose etcd", time.Minute)
			if cond := conditions.Get(c.get(), controlplanev1.RemediatingCondition); cond.Reason != controlplanev1.RemediationBlockedQuorumReason {
				t.Errorf("Remediating = %+v, want reason %s", cond, controlplanev1.RemediationBlockedQuorumReason)
			}
			if m := c.machineByName(only.Name); m == nil || !conditions.IsFalse(m, clusterv1.MachineOwnerRemediatedCondition) {
				t.Errorf("Machine %s is not marked for remediation by the MachineHealthCheck: %+v", only.Name, m)
			}
			framework.Consistently(t, 5*time.Second, func() error {
				ms, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(ms) != 1 || ms[0].Name != only.Name || !ms[0].DeletionTimestamp.IsZero() {
					return fmt.Errorf("the only control-plane Machine %s was remediated without snapshots: %s", only.Name, describeMachines(ms))
				}
				return nil
			})
			t.Logf("%s: the only Machine, unhealthy without snapshots, kept with the reason; (d) took %s", dist, time.Since(unhealthy).Round(time.Second))
		})
	}
}
