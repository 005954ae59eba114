package clusterctl

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// TestMove moves two Clusters (one with a KairosControlPlane, one with a stand-alone
// control-plane Machine) with clusterctl move from one management cluster to another where
// the same providers were installed with clusterctl init, both with their managers running.
// Every Secret (bootstrap data, certificates, kubeconfig, k3s token) arrives with the same
// name and the same bytes; on the target, once Cluster API's part is played again (status is
// not moved), the providers report the moved data as theirs and regenerate nothing: no Secret
// changes, no Machine appears.
func TestMove(t *testing.T) {
	src := startManagement(t, "source")
	dst := startManagement(t, "target")
	for _, m := range []*management{src, dst} {
		m.init(t, m.initOptions(newVersion, true))
		m.serveCoreWebhooks(t)
		m.startManager(t, bootstrapProvider)
		m.startManager(t, controlPlaneProvider)
	}
	ns := src.createNamespace(t, "workloads")
	s := src.buildScenario(t, ns)
	before := src.state(t, ns)
	ctx := framework.Context(t)

	start := time.Now()
	if err := src.Clusterctl.Move(ctx, clusterctlclient.MoveOptions{
		FromKubeconfig: src.Kubeconfig, ToKubeconfig: dst.Kubeconfig, Namespace: ns,
	}); err != nil {
		t.Fatalf("clusterctl move: %v", err)
	}
	t.Logf("clusterctl move took %s", time.Since(start).Round(100*time.Millisecond))

	t.Run("source emptied", func(t *testing.T) {
		left := src.state(t, ns)
		for kind, n := range map[string]int{
			"Secret": len(left.Secrets), "KairosConfig": len(left.Configs),
			"KairosControlPlane": len(left.ControlPlanes), "Machine": len(left.Machines),
		} {
			if n > 0 {
				t.Errorf("%d %s objects left in the source namespace", n, kind)
			}
		}
		clusters := &clusterv1.ClusterList{}
		if err := src.Client.List(ctx, clusters, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(clusters.Items) > 0 {
			t.Errorf("%d Clusters left in the source", len(clusters.Items))
		}
	})

	moved := dst.state(t, ns)
	t.Run("moved unchanged", func(t *testing.T) {
		if diffs := compareState(before, moved, false); len(diffs) > 0 {
			t.Errorf("the target's objects differ from the source's:\n%s", strings.Join(diffs, "\n"))
		}
		for name, data := range s.Data {
			got, ok := moved.Secrets[data.Name]
			if !ok {
				t.Errorf("bootstrap data Secret %s of Machine %s was not moved", data.Name, name)
				continue
			}
			if string(got.Data["value"]) != string(data.Data["value"]) {
				t.Errorf("bootstrap data Secret %s changed in the move", data.Name)
			}
		}
		for _, c := range []*clusterv1.Cluster{s.Managed, s.Standalone} {
			cluster := &clusterv1.Cluster{}
			if err := dst.Client.Get(ctx, client.ObjectKeyFromObject(c), cluster); err != nil {
				t.Fatal(err)
			}
			if ptr.Deref(cluster.Spec.Paused, false) {
				t.Errorf("Cluster %s is still paused on the target", c.Name)
			}
		}
		for _, o := range []client.Object{
			&infrav1.KairosSimCluster{}, &infrav1.KairosSimMachineTemplate{},
		} {
			name := s.Managed.Name
			if _, ok := o.(*infrav1.KairosSimMachineTemplate); ok {
				name += "-cp"
			}
			if err := dst.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
				t.Errorf("infrastructure object %T %s not moved: %v", o, name, err)
			}
		}
	})

	t.Run("target providers take over", func(t *testing.T) {
		// Status does not move: Cluster API's controllers on the target would find the
		// infrastructure provisioned, the control plane initialized and the nodes again.
		for _, c := range []*clusterv1.Cluster{s.Managed, s.Standalone} {
			cluster := &clusterv1.Cluster{}
			dst.get(t, withKey(cluster, c))
			dst.patchStatus(t, cluster, func() { cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true) })
			dst.markControlPlaneInitialized(t, cluster)
		}
		for name := range s.Machines {
			machine := &clusterv1.Machine{}
			dst.get(t, withKey(machine, s.Machines[name]))
			dst.setNodeRef(t, machine)
		}

		framework.Eventually(t, reconcileTimeout, func() error {
			configs := &bootstrapv1.KairosConfigList{}
			if err := dst.Client.List(ctx, configs, client.InNamespace(ns)); err != nil {
				return err
			}
			for i := range configs.Items {
				c := &configs.Items[i]
				if c.Status.DataSecretName != c.Name || !ptr.Deref(c.Status.Initialization.DataSecretCreated, false) {
					return fmt.Errorf("KairosConfig %s on the target does not report the moved data Secret: %+v", c.Name, c.Status)
				}
			}
			kcp := &controlplanev1.KairosControlPlane{}
			if err := dst.Client.Get(ctx, client.ObjectKeyFromObject(s.ControlPlane), kcp); err != nil {
				return err
			}
			if !ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false) {
				return errors.New("the KairosControlPlane on the target does not report its control plane initialized")
			}
			return dst.configsReady(ns)
		})
		framework.Consistently(t, settle, func() error {
			if diffs := compareState(moved, dst.state(t, ns), true); len(diffs) > 0 {
				return fmt.Errorf("the target's providers changed moved objects:\n%s", strings.Join(diffs, "\n"))
			}
			return nil
		})
	})

	// The source's providers saw their objects go while paused: nothing recreated there.
	if err := src.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: s.Managed.Name + "-ca"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the source has Secret %s-ca again after the move (%v)", s.Managed.Name, err)
	}
}

func withKey[T client.Object](o T, from client.Object) T {
	o.SetNamespace(from.GetNamespace())
	o.SetName(from.GetName())
	return o
}
