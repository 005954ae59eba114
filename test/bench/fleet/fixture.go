package fleetbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/fleet"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// createFixture creates, for every site, what a user creates for a single-node Kairos cluster
// (Cluster, KairosControlPlane with one replica, KairosSimCluster, KairosSimMachineTemplate),
// with the site's CAs as the <cluster>-ca and <cluster>-etcd Secrets (so that the control
// plane signs its kubeconfig and etcd client certificate with the CAs the simulated cluster
// trusts), and provisions the KairosSimCluster with the site's endpoint as the infrastructure
// provider would.
func (b *bench) createFixture(ctx context.Context) error {
	c := b.client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	names := b.sortedNames()
	// A few creators at once: the fixture is not what is measured.
	errs := make(chan error, len(names))
	sem := make(chan struct{}, 8)
	for _, name := range names {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- b.createSite(ctx, b.sites[name])
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) createSite(ctx context.Context, s *site) error {
	c := b.client
	labels := map[string]string{clusterv1.ClusterNameLabel: s.name}
	for purpose, kp := range map[secret.Purpose]*pki.KeyPair{secret.ClusterCA: s.ca, secret.EtcdCA: s.etcd} {
		if err := c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: secret.Name(s.name, purpose), Labels: labels},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{secret.TLSCrtDataName: kp.Cert, secret.TLSKeyDataName: kp.Key},
		}); err != nil {
			return fmt.Errorf("site %s: %w", s.name, err)
		}
	}
	ep := s.endpoint()
	infra := &infrav1.KairosSimCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: s.name, Labels: labels},
		Spec:       infrav1.KairosSimClusterSpec{ControlPlaneEndpoint: ep},
	}
	if err := c.Create(ctx, infra); err != nil {
		return fmt.Errorf("site %s: %w", s.name, err)
	}
	infra.Status.Initialization.Provisioned = ptr.To(true)
	if err := c.Status().Update(ctx, infra); err != nil {
		return fmt.Errorf("site %s: provisioning its KairosSimCluster: %w", s.name, err)
	}
	tmpl := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: s.name + "-cp", Labels: labels}}
	if err := c.Create(ctx, tmpl); err != nil {
		return fmt.Errorf("site %s: %w", s.name, err)
	}
	dist := bootstrapv1.DistributionK0s
	if s.dist == fleet.K3s {
		dist = bootstrapv1.DistributionK3s
	}
	kcp := &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: s.name, Labels: labels},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas:     ptr.To[int32](1),
			Version:      kubernetesVersion,
			Distribution: dist,
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: tmpl.Name,
				},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: "bench-fleet-password"},
		},
	}
	if err := c.Create(ctx, kcp); err != nil {
		return fmt.Errorf("site %s: creating its KairosControlPlane: %w", s.name, err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: s.name},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneEndpoint: ep,
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimCluster", Name: s.name,
			},
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: s.name,
			},
		},
	}
	if err := c.Create(ctx, cluster); err != nil {
		return fmt.Errorf("site %s: creating its Cluster: %w", s.name, err)
	}
	return nil
}

// readiness lists what is not ready yet: a cluster is ready when its KairosControlPlane is
// Available and its one Machine is Running with a nodeRef.
func (b *bench) readiness(ctx context.Context) (ready int, notReady []string, err error) {
	kcps := &controlplanev1.KairosControlPlaneList{}
	if err := b.client.List(ctx, kcps, client.InNamespace(Namespace)); err != nil {
		return 0, nil, err
	}
	machines := &clusterv1.MachineList{}
	if err := b.client.List(ctx, machines, client.InNamespace(Namespace)); err != nil {
		return 0, nil, err
	}
	running := map[string]int{}
	for _, m := range machines.Items {
		if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() && m.DeletionTimestamp.IsZero() {
			running[m.Spec.ClusterName]++
		}
	}
	seen := map[string]bool{}
	for i := range kcps.Items {
		k := &kcps.Items[i]
		seen[k.Name] = true
		switch {
		case !conditions.IsTrue(k, controlplanev1.AvailableCondition):
			c := conditions.Get(k, controlplanev1.AvailableCondition)
			msg := "no Available condition"
			if c != nil {
				msg = c.Reason + ": " + c.Message
			}
			notReady = append(notReady, k.Name+": KairosControlPlane not Available ("+msg+")")
		case running[k.Name] != 1:
			notReady = append(notReady, fmt.Sprintf("%s: %d Machines Running with a Node", k.Name, running[k.Name]))
		default:
			ready++
		}
	}
	for name, s := range b.sites {
		if !seen[name] {
			notReady = append(notReady, name+": no KairosControlPlane")
		}
		if err := s.failed(); err != nil {
			notReady = append(notReady, err.Error())
		}
	}
	sort.Strings(notReady)
	return ready, notReady, nil
}

// waitReady polls readiness (the bench's own reads, not counted) until every cluster is ready.
// It gives up when no cluster became ready for stall (a loaded machine only slows the start
// down), or after limit.
func (b *bench) waitReady(ctx context.Context, stall, limit time.Duration) (int, error) {
	start := time.Now()
	lastLog, progress, best := start, start, -1
	for {
		ready, notReady, err := b.readiness(ctx)
		if err != nil {
			return ready, err
		}
		if len(notReady) == 0 {
			return ready, nil
		}
		if ready > best {
			best, progress = ready, time.Now()
		}
		for _, n := range notReady {
			if strings.Contains(n, "did not boot") {
				return ready, errors.New(n)
			}
		}
		for m, p := range b.procs {
			if exited, err := p.Exited(); exited {
				return ready, fmt.Errorf("%s manager exited (%v); log: %s", m, err, p.LogPath)
			}
		}
		if time.Since(progress) > stall || time.Since(start) > limit || ctx.Err() != nil {
			return ready, fmt.Errorf("%d of %d clusters ready after %s (the last became ready %s ago); first not ready: %s",
				ready, b.o.N, time.Since(start).Round(time.Second), time.Since(progress).Round(time.Second), strings.Join(notReady[:min(5, len(notReady))], "; "))
		}
		if time.Since(lastLog) > 30*time.Second {
			b.o.Logf("%d of %d clusters ready", ready, b.o.N)
			lastLog = time.Now()
		}
		time.Sleep(2 * time.Second)
	}
}

// checkStillReady reports clusters no longer ready after the window.
func (b *bench) checkStillReady(ctx context.Context) []string {
	_, notReady, err := b.readiness(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, n := range notReady {
		out = append(out, "after the window: "+n)
	}
	return out
}

func serverVersion(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// execOutput runs a command and returns its output, stdout and stderr together.
func execOutput(bin string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
