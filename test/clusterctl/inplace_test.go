package clusterctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// inPlaceVersion is what the in-place update moves the single node to.
const inPlaceVersion = "v1.37.0"

// TestControlPlaneManagerKilledDuringInPlaceUpdate (issue 20, e): the control-plane manager (a
// process of this tree's release, installed by clusterctl with EXP_IN_PLACE_UPDATES=true, serving
// the Kairos update extension registered with the ExtensionConfig the provider ships) is killed
// with SIGKILL twice while a single-node control plane is updated in place to the next
// minor version and Kairos image, and started again each time, as a Deployment would:
//
//  1. the moment the control plane has marked the Machine for the update (update-in-progress
//     annotation), while it writes the update's trigger;
//  2. the moment the node goes down to reboot into the new image: the extension, called by
//     Cluster API's Machine controller, has asked the Kairos operator of the workload cluster for
//     the upgrade (a NodeOpUpgrade) and waits for the node to come back.
//
// The update must resume and finish on the same Machine, Node and etcd member, with the node
// rebooted into the new image exactly once, no Machine created or deleted, and neither the
// update-in-progress annotation nor a pending hook left behind. k0s and k3s: what is killed is
// the management side, but the node it resumes on reports its image, kubelet version and etcd
// member as its distribution does.
func TestControlPlaneManagerKilledDuringInPlaceUpdate(t *testing.T) {
	// Each distribution takes a slot of its own (below); the test itself only starts them.
	t.Parallel()
	for _, dist := range []bootstrapv1.Distribution{bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s} {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			killDuringInPlaceUpdate(t, dist)
		})
	}
}

func killDuringInPlaceUpdate(t *testing.T, dist bootstrapv1.Distribution) {
	ctx := framework.Context(t)
	x := startInPlace(t, string(dist))
	x.createSingleNodeCluster(t, dist)
	start := time.Now()
	before := x.settled(t, 1)[0]
	t.Logf("single-node control plane ready in %s", time.Since(start).Round(time.Second))

	sim := x.cluster.SimCluster(ctx)
	if err := sim.InstallKairosOperator(ctx); err != nil {
		t.Fatal(err)
	}
	node := x.cluster.Node(before.Spec.InfrastructureRef.Name)
	if node == nil {
		t.Fatalf("no simulated node for Machine %s", before.Name)
	}
	upgradesBefore, membersBefore := node.Upgrades(), sim.EtcdMembers()

	wc, err := client.NewWithWatch(x.Env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	machinesSeen := watchMachines(ctx, t, wc, x.ns, x.kcp.Name)
	w, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(x.ns), client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: x.kcp.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	newImage := simnode.KairosImage(render.Distribution(dist), inPlaceVersion)
	start = time.Now()
	x.updateControlPlane(t, func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Version = inPlaceVersion
		s.KairosConfigSpec.Image = newImage
	})

	// 1. Frozen (SIGSTOP) as soon as the Machine carries the annotation, killed then.
	deadline := time.After(2 * time.Minute)
	for marked := false; !marked; {
		select {
		case ev := <-w.ResultChan():
			m, ok := ev.Object.(*clusterv1.Machine)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
				x.freeze(t)
				marked = true
			}
		case <-deadline:
			t.Fatal("the control plane did not start the in-place update within 2m")
		}
	}
	m := &clusterv1.Machine{}
	if err := x.Client.Get(ctx, client.ObjectKeyFromObject(&before), m); err != nil {
		t.Fatal(err)
	}
	x.killAndRestart(t, fmt.Sprintf("after it marked Machine %s for the update (UpdateMachine pending by then: %v, Machine version %s)",
		m.Name, m.Annotations[runtimev1.PendingHooksAnnotation] != "", m.Spec.Version))

	// 2. Frozen as soon as the node goes down to reboot into the new image: the extension has
	// asked the Kairos operator for the upgrade and waits for the node to come back.
	pid := x.managers[controlPlaneProvider.Name].Pid()
	frozen := make(chan error, 1)
	var once sync.Once
	unsubscribe := x.h.Registry.Subscribe(func(e simnode.NodeEvent) {
		if e.ProviderID == node.ProviderID() && node.Status().Reason == simnode.ReasonRebooting {
			once.Do(func() { frozen <- syscall.Kill(pid, syscall.SIGSTOP) })
		}
	})
	select {
	case err := <-frozen:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the node did not start its upgrade within 2m")
	}
	unsubscribe()
	x.killAndRestart(t, fmt.Sprintf("while the node rebooted for its upgrade (node %s)", node.Status().Phase))

	var after clusterv1.Machine
	framework.Eventually(t, 4*time.Minute, func() error {
		machines := x.settled(t, 1)
		after = machines[0]
		if after.Spec.Version != inPlaceVersion {
			return fmt.Errorf("Machine %s at %s, want %s", after.Name, after.Spec.Version, inPlaceVersion)
		}
		for _, a := range []string{clusterv1.UpdateInProgressAnnotation, runtimev1.PendingHooksAnnotation} {
			if v, ok := after.Annotations[a]; ok {
				return fmt.Errorf("Machine %s still has annotation %s=%q", after.Name, a, v)
			}
		}
		return nil
	})
	t.Logf("updated in place to %s %s after the update began", inPlaceVersion, time.Since(start).Round(time.Second))

	// The watch lists the Machine that existed when it started as added.
	created, peak := machinesSeen()
	created = slices.DeleteFunc(created, func(name string) bool { return name == before.Name })
	if after.UID != before.UID || len(created) > 0 || peak > 1 {
		t.Errorf("Machines were replaced: %s (uid %s) before, %s (uid %s) after; created during the update: %v; up to %d at once",
			before.Name, before.UID, after.Name, after.UID, created, peak)
	}
	if n := node.Upgrades() - upgradesBefore; n != 1 {
		t.Errorf("the node was upgraded %d times during the update, want once", n)
	}
	if running := node.RunningImage(); running != newImage {
		t.Errorf("the node runs %s, want %s", running, newImage)
	}
	if after.Spec.ProviderID != before.Spec.ProviderID || after.Status.NodeRef.Name != before.Status.NodeRef.Name {
		t.Errorf("the Machine's node changed: provider ID %q, node %s (was %q, %s)", after.Spec.ProviderID, after.Status.NodeRef.Name, before.Spec.ProviderID, before.Status.NodeRef.Name)
	}
	if members := sim.EtcdMembers(); len(members) != 1 || len(membersBefore) != 1 || members[0].MemberID != membersBefore[0].MemberID {
		t.Errorf("etcd members after the update %+v, before %+v", members, membersBefore)
	}
	// Nothing the killed managers created is left without its Machine.
	if err := orphansOf(ctx, x.Client, x.ns, x.kcp.Name, []clusterv1.Machine{after}); err != nil {
		t.Error(err)
	}

	if err := x.cluster.Delete(ctx, harness.DefaultDeleteTimeout); err != nil {
		t.Fatalf("deleting the cluster: %v", err)
	}
}

// startInPlace starts a management cluster as startMixed does, with both providers of this
// tree's release, and with in-place updates on: clusterctl init sets EXP_IN_PLACE_UPDATES=true
// (the control-plane manager's InPlaceUpdates gate), Cluster API in this process runs with its
// RuntimeSDK and InPlaceUpdates gates and its ExtensionConfig reconciler, and the
// ExtensionConfig the control-plane provider ships (controlplane/config/extension) is applied
// and pointed at the manager process, as the webhooks are.
func startInPlace(t *testing.T, name string) *mixedManagement {
	t.Helper()
	ctx := framework.Context(t)
	m := startManagement(t, "in-place-"+name)
	// The test repositories' configuration with EXP_IN_PLACE_UPDATES=true, read by a reader of
	// this client's own: clusterctl's keeps what it reads in viper's process-global instance, so
	// the other tests' clients, created side by side, would read this variable (and this one
	// theirs).
	reader := &configFileReader{extra: map[string]string{"EXP_IN_PLACE_UPDATES": "true"}}
	// clusterctl initialises only the reader it creates itself.
	if err := reader.Init(ctx, m.Repos.ConfigFile); err != nil {
		t.Fatal(err)
	}
	config, err := clusterctlconfig.New(ctx, m.Repos.ConfigFile, clusterctlconfig.InjectReader(reader))
	if err != nil {
		t.Fatal(err)
	}
	if m.Clusterctl, err = clusterctlclient.New(ctx, m.Repos.ConfigFile, clusterctlclient.InjectConfig(config)); err != nil {
		t.Fatal(err)
	}
	m.init(t, m.initOptions(newVersion, true))
	deployments := &appsv1.DeploymentList{}
	if err := m.Client.List(ctx, deployments, client.InNamespace(controlPlaneProvider.Namespace),
		client.MatchingLabels{clusterv1.ProviderNameLabel: controlPlaneProvider.Label}); err != nil {
		t.Fatal(err)
	}
	if len(deployments.Items) != 1 || !slices.ContainsFunc(managerContainer(&deployments.Items[0]).Args, func(a string) bool {
		return strings.HasPrefix(a, "--feature-gates=") && strings.Contains(a, "InPlaceUpdates=true")
	}) {
		t.Fatalf("clusterctl init did not turn the control-plane manager's InPlaceUpdates gate on: %+v", deployments.Items)
	}

	// The registration as the provider ships it, applied once Cluster API runs (its
	// ExtensionConfig reconciler would otherwise fail its warm-up on an extension nobody serves
	// yet); startManager points it at the control-plane process, as the webhooks.
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "controlplane", "config", "extension", "extensionconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ec := &runtimev1.ExtensionConfig{}
	if err := yaml.UnmarshalStrict(data, ec); err != nil {
		t.Fatal(err)
	}
	x := m.runProviders(t, harness.Options{Env: m.Env, NoBootstrapProvider: true, InPlaceUpdates: true, InPlaceExtensionElsewhere: true},
		func(x *mixedManagement) {
			if err := x.h.Client.Create(ctx, ec); err != nil {
				t.Fatal(err)
			}
		})
	// Cluster API has discovered the extension at the process.
	framework.Eventually(t, time.Minute, func() error {
		if err := x.h.Client.Get(ctx, client.ObjectKeyFromObject(ec), ec); err != nil {
			return err
		}
		if len(ec.Status.Handlers) == 0 {
			return fmt.Errorf("ExtensionConfig %s: no handlers discovered yet (conditions %+v)", ec.Name, ec.Status.Conditions)
		}
		return nil
	})
	return x
}

// createSingleNodeCluster creates a cluster of one control-plane Machine and no workers, on the
// Kairos image of its distribution and version, that may not surge: the shape of a site's single
// device.
func (x *mixedManagement) createSingleNodeCluster(t *testing.T, dist bootstrapv1.Distribution) {
	t.Helper()
	x.createControlPlaneCluster(t, "single", 1, func(s *controlplanev1.KairosControlPlaneSpec) {
		s.Distribution = dist
		s.KairosConfigSpec.Image = simnode.KairosImage(render.Distribution(dist), kubernetesVersionSim)
		s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
	})
}

// freeze stops the control-plane manager (SIGSTOP) at once, so that what it has written by now
// is all it writes.
func (x *mixedManagement) freeze(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(x.managers[controlPlaneProvider.Name].Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// killAndRestart kills the (frozen) control-plane manager with SIGKILL and starts it again, as a
// Deployment would.
func (x *mixedManagement) killAndRestart(t *testing.T, when string) {
	t.Helper()
	cp := x.managers[controlPlaneProvider.Name]
	if err := syscall.Kill(cp.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("control-plane manager killed %s", when)
	cp.stop(t) // reaps the process; a SIGKILL is how it was meant to end
	x.managers[controlPlaneProvider.Name] = x.startManagerUntil(t, x.owner, controlPlaneProvider)
}

// configFileReader is a clusterctl configuration reader (clusterctlconfig.Reader) of one file
// plus extra variables, whose values belong to the client it was injected into.
type configFileReader struct {
	values map[string]any
	extra  map[string]string
}

func (r *configFileReader) Init(_ context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, &r.values)
}

// Get returns a variable: a string as it is, anything else (providers, cert-manager) as YAML,
// as clusterctl's own reader does.
func (r *configFileReader) Get(key string) (string, error) {
	if v, ok := r.extra[key]; ok {
		return v, nil
	}
	v, ok := r.values[key]
	if !ok {
		return "", fmt.Errorf("value for variable %q is not set", key)
	}
	if s, ok := v.(string); ok {
		return s, nil
	}
	data, err := yaml.Marshal(v)
	return string(data), err
}

func (r *configFileReader) Set(key, value string) { r.extra[key] = value }

func (r *configFileReader) UnmarshalKey(key string, rawval any) error {
	v, ok := r.values[key]
	if !ok {
		return nil // as clusterctl's reader: a missing key leaves rawval alone
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, rawval)
}
