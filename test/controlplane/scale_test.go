package controlplane_test

import (
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// TestScaleSubresource: what `kubectl scale kairoscontrolplane/<name> --replicas=N` and the
// HorizontalPodAutoscaler-style clients do, through the scale subresource the control-plane
// contract requires.
func TestScaleSubresource(t *testing.T) {
	ns := newNamespace(t)
	ctx := framework.Context(t)
	c := mgmt.Client

	cp := kcp(ns, "scaled", validSpec())
	if err := c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}

	getScale := func() *autoscalingv1.Scale {
		t.Helper()
		s := &autoscalingv1.Scale{}
		if err := c.SubResource("scale").Get(ctx, cp, s); err != nil {
			t.Fatalf("get scale: %v", err)
		}
		return s
	}
	getKCP := func() *controlplanev1.KairosControlPlane {
		t.Helper()
		out := &controlplanev1.KairosControlPlane{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cp), out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// spec.replicas is the scale's spec.
	s := getScale()
	if s.Spec.Replicas != 3 {
		t.Fatalf("scale spec.replicas = %d, want 3", s.Spec.Replicas)
	}

	// status.replicas and status.selector are the scale's status.
	withStatus := getKCP()
	withStatus.Status.Replicas = ptr.To[int32](3)
	withStatus.Status.Selector = "cluster.x-k8s.io/cluster-name=c1,cluster.x-k8s.io/control-plane"
	if err := c.Status().Update(ctx, withStatus); err != nil {
		t.Fatal(err)
	}
	s = getScale()
	if s.Status.Replicas != 3 || s.Status.Selector != withStatus.Status.Selector {
		t.Errorf("scale status = %+v, want replicas 3 and selector %q", s.Status, withStatus.Status.Selector)
	}

	// Scaling changes spec.replicas.
	s.Spec.Replicas = 5
	if err := c.SubResource("scale").Update(ctx, cp, client.WithSubResourceBody(s)); err != nil {
		t.Fatalf("scale to 5: %v", err)
	}
	if got := getKCP(); got.Spec.Replicas == nil || *got.Spec.Replicas != 5 {
		t.Fatalf("spec.replicas = %v after scaling to 5", got.Spec.Replicas)
	}
	if getScale().Spec.Replicas != 5 {
		t.Fatal("scale does not report 5 replicas")
	}

	// And down again.
	s = getScale()
	s.Spec.Replicas = 1
	if err := c.SubResource("scale").Update(ctx, cp, client.WithSubResourceBody(s)); err != nil {
		t.Fatalf("scale to 1: %v", err)
	}
	if got := getKCP(); *got.Spec.Replicas != 1 {
		t.Fatalf("spec.replicas = %d after scaling to 1", *got.Spec.Replicas)
	}

	// Zero (or fewer) replicas cannot be set through the scale subresource either: the CRD's
	// minimum applies to the object the scale update produces.
	for _, n := range []int32{0, -1} {
		s = getScale()
		s.Spec.Replicas = n
		err := c.SubResource("scale").Update(ctx, cp, client.WithSubResourceBody(s))
		assertRejected(t, err, []string{"spec.replicas", "greater than or equal to 1"})
	}
	if got := getKCP(); *got.Spec.Replicas != 1 {
		t.Fatalf("spec.replicas = %d after refused scale requests", *got.Spec.Replicas)
	}

	// A scale the spec forbids is refused by the scale webhook: maxSurge 0 needs 3 replicas (or
	// one, which can only change in place).
	surge0 := getKCP()
	zero := intstr.FromInt32(0)
	surge0.Spec.Replicas = ptr.To[int32](3)
	surge0.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = &zero
	if err := c.Update(ctx, surge0); err != nil {
		t.Fatal(err)
	}
	s = getScale()
	s.Spec.Replicas = 2
	err := c.SubResource("scale").Update(ctx, cp, client.WithSubResourceBody(s))
	assertRejected(t, err, []string{"spec.rollout.strategy.rollingUpdate.maxSurge", "use maxSurge 1 or at least 3 replicas"})
	// An even count is refused too: it tolerates no more failures than the odd one below.
	s = getScale()
	s.Spec.Replicas = 4
	err = c.SubResource("scale").Update(ctx, cp, client.WithSubResourceBody(s))
	assertRejected(t, err, []string{"spec.replicas", "must be odd"})
	surge0 = getKCP()
	surge0.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(1))
	surge0.Spec.Replicas = ptr.To[int32](1)
	if err := c.Update(ctx, surge0); err != nil {
		t.Fatal(err)
	}

	// The object stays editable after scaling: the webhooks see the scaled spec.
	got := getKCP()
	got.Spec.Version = "v1.32.0"
	if err := c.Update(ctx, got); err != nil {
		t.Fatalf("update after scaling: %v", err)
	}
}
