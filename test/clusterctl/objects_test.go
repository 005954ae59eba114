package clusterctl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// kubernetesVersion of the test Machines.
const kubernetesVersion = "v1.31.2"

// reconcileTimeout bounds every wait for a manager.
const reconcileTimeout = time.Minute

// createNamespace creates a namespace.
func (m *management) createNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := m.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// createCluster creates a Cluster on KairosSimCluster infrastructure, with a
// KairosControlPlane as its control plane when managed is true (create it with
// createControlPlane), and then does what Cluster API's Cluster controller and the
// infrastructure provider would: the infrastructure is provisioned, its endpoint (a closed
// local port: no workload API server runs) is the Cluster's, the Cluster owns it.
func (m *management) createCluster(t *testing.T, ns, name string, managed bool) *clusterv1.Cluster {
	t.Helper()
	ctx := context.Background()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	endpoint := clusterv1.APIEndpoint{Host: "127.0.0.1", Port: int32(port)}
	infra := &infrav1.KairosSimCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec:       infrav1.KairosSimClusterSpec{ControlPlaneEndpoint: endpoint},
	}
	if err := m.Client.Create(ctx, infra); err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: endpoint,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimCluster", Name: name,
			},
		},
	}
	if managed {
		cluster.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{
			APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: name,
		}
	}
	if err := m.Client.Create(ctx, cluster); err != nil {
		t.Fatalf("creating Cluster %s: %v", name, err)
	}

	m.patch(t, infra, func() { infra.OwnerReferences = append(infra.OwnerReferences, clusterOwnerRef(cluster)) })
	m.patchStatus(t, infra, func() { infra.Status.Initialization.Provisioned = ptr.To(true) })
	m.patchStatus(t, cluster, func() { cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true) })
	return cluster
}

func clusterOwnerRef(c *clusterv1.Cluster) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: c.Name, UID: c.UID}
}

// createControlPlane creates the KairosControlPlane of a managed Cluster (one k0s replica on
// KairosSimMachines), owned by the Cluster as the Cluster controller would set it.
func (m *management) createControlPlane(t *testing.T, cluster *clusterv1.Cluster) *controlplanev1.KairosControlPlane {
	t.Helper()
	ctx := context.Background()
	tmpl := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{
		Namespace: cluster.Namespace, Name: cluster.Name + "-cp",
		OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(cluster)},
	}}
	if err := m.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	kcp := &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace, Name: cluster.Spec.ControlPlaneRef.Name,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
			OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(cluster)},
		},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Version: kubernetesVersion,
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: tmpl.Name,
				},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "not-the-default-password"},
		},
	}
	if err := m.Client.Create(ctx, kcp); err != nil {
		t.Fatalf("creating KairosControlPlane: %v", err)
	}
	return kcp
}

// createMachine creates a stand-alone Machine with its KairosConfig (spec) and KairosSimMachine,
// all named name.
func (m *management) createMachine(t *testing.T, cluster *clusterv1.Cluster, name string, spec bootstrapv1.KairosConfigSpec) *clusterv1.Machine {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{clusterv1.ClusterNameLabel: cluster.Name}
	if spec.Role == bootstrapv1.RoleControlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels}, Spec: spec}
	if err := m.Client.Create(ctx, config); err != nil {
		t.Fatalf("creating KairosConfig %s: %v", name, err)
	}
	infra := &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels}}
	if err := m.Client.Create(ctx, infra); err != nil {
		t.Fatal(err)
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: name, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Version:     kubernetesVersion,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: name,
			}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachine", Name: name,
			},
		},
	}
	if err := m.Client.Create(ctx, machine); err != nil {
		t.Fatalf("creating Machine %s: %v", name, err)
	}
	return machine
}

// adoptByMachine does what Cluster API's Machine controller does first with a Machine: a
// Machine nobody owns is adopted by its Cluster, and the Machine becomes the controller of its
// KairosConfig and infrastructure machine, replacing the owner references set on creation by
// a control plane.
func (m *management) adoptByMachine(t *testing.T, machine *clusterv1.Machine) {
	t.Helper()
	if len(machine.OwnerReferences) == 0 {
		cluster := &clusterv1.Cluster{}
		if err := m.Client.Get(context.Background(), client.ObjectKey{Namespace: machine.Namespace, Name: machine.Spec.ClusterName}, cluster); err != nil {
			t.Fatal(err)
		}
		m.patch(t, machine, func() { machine.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(cluster)} })
	}
	ref := metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID, Controller: ptr.To(true),
	}
	config := &bootstrapv1.KairosConfig{ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Spec.Bootstrap.ConfigRef.Name}}
	infra := &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Spec.InfrastructureRef.Name}}
	for _, o := range []client.Object{config, infra} {
		m.get(t, o)
		m.patch(t, o, func() { o.SetOwnerReferences([]metav1.OwnerReference{ref}) })
	}
}

// waitForBootstrapData waits until the bootstrap provider reports the Machine's bootstrap data
// (DataSecretAvailable and Ready, status.dataSecretName, initialization.dataSecretCreated),
// checks the data Secret, and then does the Machine controller's part: it copies the Secret
// name into the Machine's spec.bootstrap.dataSecretName.
func (m *management) waitForBootstrapData(t *testing.T, machine *clusterv1.Machine) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: machine.Namespace, Name: machine.Spec.Bootstrap.ConfigRef.Name}
	config := &bootstrapv1.KairosConfig{}
	data := &corev1.Secret{}
	framework.Eventually(t, reconcileTimeout, func() error {
		if err := m.Client.Get(ctx, key, config); err != nil {
			return err
		}
		for _, c := range []string{bootstrapv1.DataSecretAvailableCondition, bootstrapv1.ReadyCondition} {
			if !conditions.IsTrue(config, c) {
				return fmt.Errorf("KairosConfig %s: condition %s is not true: %+v", key.Name, c, config.Status.Conditions)
			}
		}
		if config.Status.DataSecretName == "" || !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
			return fmt.Errorf("KairosConfig %s: status has no data Secret: %+v", key.Name, config.Status)
		}
		return m.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: config.Status.DataSecretName}, data)
	})
	if len(data.Data["value"]) == 0 {
		t.Errorf("bootstrap data Secret %s has no value", data.Name)
	}
	if data.Type != clusterv1.ClusterSecretType {
		t.Errorf("bootstrap data Secret %s has type %s, want %s", data.Name, data.Type, clusterv1.ClusterSecretType)
	}
	if !metav1.IsControlledBy(data, config) {
		t.Errorf("bootstrap data Secret %s is not controlled by KairosConfig %s: %v", data.Name, config.Name, data.OwnerReferences)
	}
	m.patch(t, machine, func() { machine.Spec.Bootstrap.DataSecretName = ptr.To(data.Name) })
	return data
}

// setNodeRef records the Machine's node, as the Machine controller does once the node
// registered in the workload cluster.
func (m *management) setNodeRef(t *testing.T, machine *clusterv1.Machine) {
	t.Helper()
	m.patchStatus(t, machine, func() { machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: machine.Name} })
}

// markControlPlaneInitialized sets what the Cluster controller sets once the control plane is
// initialized: the ControlPlaneInitialized condition and, with a control-plane provider,
// status.initialization.controlPlaneInitialized (copied from the provider's status).
func (m *management) markControlPlaneInitialized(t *testing.T, cluster *clusterv1.Cluster) {
	t.Helper()
	m.patchStatus(t, cluster, func() {
		if cluster.Spec.ControlPlaneRef.IsDefined() {
			cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
		}
		meta.SetStatusCondition(&cluster.Status.Conditions, metav1.Condition{
			Type: clusterv1.ClusterControlPlaneInitializedCondition, Status: metav1.ConditionTrue,
			Reason: clusterv1.ClusterControlPlaneInitializedReason, ObservedGeneration: cluster.Generation,
		})
	})
}

// controlPlaneMachines lists the Machines of a KairosControlPlane.
func (m *management) controlPlaneMachines(t *testing.T, kcp *controlplanev1.KairosControlPlane) []clusterv1.Machine {
	t.Helper()
	list := &clusterv1.MachineList{}
	if err := m.Client.List(context.Background(), list, client.InNamespace(kcp.Namespace),
		client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: kcp.Name}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// clusterSecretNames are the Secrets a control plane needs for a cluster: certificates and
// kubeconfig.
func clusterSecretNames(cluster string) []string {
	var names []string
	for _, p := range []secret.Purpose{secret.ClusterCA, secret.EtcdCA, secret.FrontProxyCA, secret.ServiceAccount, secret.Kubeconfig} {
		names = append(names, secret.Name(cluster, p))
	}
	return names
}

// scenario is what buildScenario leaves in a namespace: two Clusters whose bootstrap data
// exists, as Cluster API would have them once their first control-plane nodes registered.
type scenario struct {
	Namespace string
	// Managed has a KairosControlPlane (k0s, one replica) that created its Machine.
	Managed      *clusterv1.Cluster
	ControlPlane *controlplanev1.KairosControlPlane
	// Standalone has no control-plane provider: one control-plane Machine with its own
	// KairosConfig (k3s), for which the bootstrap provider creates the cluster certificates.
	Standalone *clusterv1.Cluster
	// Machines of both Clusters and their bootstrap data Secrets, by Machine name.
	Machines map[string]*clusterv1.Machine
	Data     map[string]*corev1.Secret
}

// buildScenario creates the scenario's objects through the API server and waits for the
// running providers to reconcile them, playing Cluster API's core controllers in between.
func (m *management) buildScenario(t *testing.T, ns string) *scenario {
	t.Helper()
	ctx := context.Background()
	s := &scenario{Namespace: ns, Machines: map[string]*clusterv1.Machine{}, Data: map[string]*corev1.Secret{}}

	// The control plane creates the cluster certificates and kubeconfig, then its first
	// Machine with a KairosConfig and a KairosSimMachine cloned from the template.
	s.Managed = m.createCluster(t, ns, "managed", true)
	s.ControlPlane = m.createControlPlane(t, s.Managed)
	framework.Eventually(t, reconcileTimeout, func() error {
		for _, name := range clusterSecretNames(s.Managed.Name) {
			sec := &corev1.Secret{}
			if err := m.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
				return fmt.Errorf("the KairosControlPlane did not create Secret %s: %w", name, err)
			}
			if !metav1.IsControlledBy(sec, s.ControlPlane) {
				return fmt.Errorf("secret %s is not controlled by the KairosControlPlane: %v", name, sec.OwnerReferences)
			}
		}
		return nil
	})
	var machine *clusterv1.Machine
	framework.Eventually(t, reconcileTimeout, func() error {
		machines := m.controlPlaneMachines(t, s.ControlPlane)
		if len(machines) != 1 {
			return fmt.Errorf("the KairosControlPlane has %d Machines, want 1", len(machines))
		}
		machine = &machines[0]
		return nil
	})
	m.adoptByMachine(t, machine)
	s.Data[machine.Name] = m.waitForBootstrapData(t, machine)
	m.setNodeRef(t, machine)
	s.Machines[machine.Name] = machine
	framework.Eventually(t, reconcileTimeout, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := m.Client.Get(ctx, client.ObjectKeyFromObject(s.ControlPlane), kcp); err != nil {
			return err
		}
		if !ptr.Deref(kcp.Status.Initialization.ControlPlaneInitialized, false) {
			return errors.New("the KairosControlPlane does not report its control plane initialized after its Machine got a node")
		}
		s.ControlPlane = kcp
		return nil
	})
	m.markControlPlaneInitialized(t, s.Managed)

	// Without a control-plane provider the bootstrap provider creates the certificates.
	s.Standalone = m.createCluster(t, ns, "standalone", false)
	standalone := m.createMachine(t, s.Standalone, "standalone-cp", bootstrapv1.KairosConfigSpec{
		Role: bootstrapv1.RoleControlPlane, Distribution: bootstrapv1.DistributionK3s, UserPassword: "not-the-default-password",
	})
	m.adoptByMachine(t, standalone)
	s.Data[standalone.Name] = m.waitForBootstrapData(t, standalone)
	m.setNodeRef(t, standalone)
	m.markControlPlaneInitialized(t, s.Standalone)
	s.Machines[standalone.Name] = standalone
	return s
}

// state is what must survive provider upgrades and moves: every Secret, KairosConfig,
// KairosControlPlane and Machine of a namespace.
type state struct {
	Secrets                          map[string]secretState
	Configs, ControlPlanes, Machines map[string]types.UID
}

type secretState struct {
	UID  types.UID
	Type corev1.SecretType
	Data map[string][]byte
}

func (m *management) state(t *testing.T, ns string) state {
	t.Helper()
	ctx := context.Background()
	s := state{Secrets: map[string]secretState{}, Configs: map[string]types.UID{}, ControlPlanes: map[string]types.UID{}, Machines: map[string]types.UID{}}
	secrets := &corev1.SecretList{}
	configs := &bootstrapv1.KairosConfigList{}
	kcps := &controlplanev1.KairosControlPlaneList{}
	machines := &clusterv1.MachineList{}
	for _, l := range []client.ObjectList{secrets, configs, kcps, machines} {
		if err := m.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range secrets.Items {
		s.Secrets[o.Name] = secretState{UID: o.UID, Type: o.Type, Data: o.Data}
	}
	for _, o := range configs.Items {
		s.Configs[o.Name] = o.UID
	}
	for _, o := range kcps.Items {
		s.ControlPlanes[o.Name] = o.UID
	}
	for _, o := range machines.Items {
		s.Machines[o.Name] = o.UID
	}
	return s
}

// compareState reports how now differs from before: objects added or removed, Secret types
// and data changed and, with sameUIDs, objects replaced.
func compareState(before, now state, sameUIDs bool) []string {
	var diffs []string
	uids := func(kind string, b, n map[string]types.UID) {
		for name, uid := range b {
			switch got, ok := n[name]; {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s %s is gone", kind, name))
			case sameUIDs && got != uid:
				diffs = append(diffs, fmt.Sprintf("%s %s was replaced (uid %s, was %s)", kind, name, got, uid))
			}
		}
		for name := range n {
			if _, ok := b[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s is new", kind, name))
			}
		}
	}
	uids("KairosConfig", before.Configs, now.Configs)
	uids("KairosControlPlane", before.ControlPlanes, now.ControlPlanes)
	uids("Machine", before.Machines, now.Machines)
	secretUIDs := func(m map[string]secretState) map[string]types.UID {
		out := map[string]types.UID{}
		for k, v := range m {
			out[k] = v.UID
		}
		return out
	}
	uids("Secret", secretUIDs(before.Secrets), secretUIDs(now.Secrets))
	for name, b := range before.Secrets {
		n, ok := now.Secrets[name]
		if !ok {
			continue
		}
		if n.Type != b.Type {
			diffs = append(diffs, fmt.Sprintf("Secret %s changed type from %s to %s", name, b.Type, n.Type))
		}
		if len(n.Data) != len(b.Data) {
			diffs = append(diffs, fmt.Sprintf("Secret %s has keys %v, had %v", name, keys(n.Data), keys(b.Data)))
		}
		for k, v := range b.Data {
			if string(n.Data[k]) != string(v) {
				diffs = append(diffs, fmt.Sprintf("Secret %s: %s changed", name, k))
			}
		}
	}
	return diffs
}

func (m *management) get(t *testing.T, o client.Object) {
	t.Helper()
	if err := m.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
}

// patch applies mutate to o (freshly read) as a merge patch.
func (m *management) patch(t *testing.T, o client.Object, mutate func()) {
	t.Helper()
	base := o.DeepCopyObject().(client.Object)
	mutate()
	if err := m.Client.Patch(context.Background(), o, client.MergeFrom(base)); err != nil {
		t.Fatalf("patching %T %s: %v", o, o.GetName(), err)
	}
}

// patchStatus applies mutate to o's status as a merge patch.
func (m *management) patchStatus(t *testing.T, o client.Object, mutate func()) {
	t.Helper()
	base := o.DeepCopyObject().(client.Object)
	mutate()
	if err := m.Client.Status().Patch(context.Background(), o, client.MergeFrom(base)); err != nil {
		t.Fatalf("patching the status of %T %s: %v", o, o.GetName(), err)
	}
}
