package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
	"github.com/kairos-capi/kairos-capi/test/framework"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/objectstore"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

const restoreBucket = "site-backups"

// TestSingleNodeRestoresFromSnapshot is issue 34's scenarios (a), (b) and (c), through Cluster
// API, on one cluster per distribution: a single-node control plane with etcd snapshots to an S3
// store the test runs (TLS, Signature V4).
//
// (b) The node is upgraded in place (maxSurge 0, the Kairos operator): when it starts rebooting
// (its status event, read synchronously, before anything of the reboot runs), the store already
// holds the pre-upgrade snapshot its before-upgrade stage took, of a time before the reboot.
//
// (a) Then the node loses its only VM on the hypervisor. With no MachineHealthCheck (none could
// read the cluster, whose API server went with the node), the control plane remediates its last
// Machine once Cluster API says its infrastructure is deleted, because it has snapshots, and the replacement restores the newest good snapshot before Kubernetes starts (the
// rendered restore, real etcd restore): the cluster keeps its endpoint, its CA (the kubeconfig
// from before works) and its service-account keys (a token issued before authenticates), holds
// an object written before the snapshot and not one written after it, and EtcdRestored names
// the snapshot. The snapshot is an on-demand one, asked for with the annotation before the
// upgrade (echoed in status.etcd.snapshotRequest); the store is made read-only once it holds it, so that
// no later scheduled snapshot can hold the object written after it, whatever the machine's speed.
//
// (c) Before the VM is deleted, a corrupt object named as a newer snapshot of the node is put in
// the store, and the store is made unreachable: the replacement's node waits (its status says
// the listing failed and it waits for the store) and EtcdRestored says Restoring with the reason
// the management cluster sees (the store cannot be listed). Once the store is back, the node
// restores, skipping the corrupt object: EtcdRestored names the previous, good snapshot.
func TestSingleNodeRestoresFromSnapshot(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			store := objectstore.Start(t, objectstore.Options{Buckets: []string{restoreBucket}, Region: "eu-west-1"})
			c := newControlPlaneCluster(t, dist, cpOptions{inPlace: true, replicas: 1, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
				s.KairosConfigSpec.Image = kairosImage(dist, version)
				s.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
				s.Etcd.Snapshots = &bootstrapv1.EtcdSnapshots{Schedule: "* * * * *", Retention: ptr.To[int32](3), S3: bootstrapv1.EtcdSnapshotS3{
					Endpoint: store.Endpoint, Bucket: restoreBucket, Region: store.Region, CABundle: string(store.CAPEM),
					CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "site-backups-s3"},
				}}
			}})
			if err := c.h.Client.Create(c.ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: c.key.Namespace, Name: "site-backups-s3"},
				Data: map[string][]byte{
					bootstrapv1.EtcdSnapshotAccessKeyIDKey: []byte(store.AccessKeyID), bootstrapv1.EtcdSnapshotSecretAccessKeyKey: []byte(store.SecretAccessKey),
				},
			}); err != nil {
				t.Fatal(err)
			}
			machines := c.waitSettled(1, version, waitScale)
			endpoint, err := c.Endpoint(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			folder := c.key.Namespace + "/" + c.key.Name // <prefix>/<namespace>/<cluster>, no prefix
			cfg, err := c.WorkloadConfig(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}

			// A service-account token issued before the snapshot, and an object written before it:
			// before the upgrade, so that the pre-upgrade snapshot already holds them (no wait for
			// the next scheduled one).
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}}
			if err := wl.Create(c.ctx, sa); err != nil {
				t.Fatal(err)
			}
			tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
			if err := wl.SubResource("token").Create(c.ctx, sa, tr); err != nil {
				t.Fatal(err)
			}
			if err := wl.Create(c.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before-snapshot"}}); err != nil {
				t.Fatal(err)
			}
			written := time.Now().Unix()
			// An on-demand snapshot, asked for with the annotation now, so that the node takes it
			// while the upgrade below goes on: the control plane hands the request to the node,
			// and its status shows the snapshot the node took (checked after the upgrade).
			asked := time.Now()
			c.annotate(controlplanev1.EtcdSnapshotRequestAnnotation, "before-the-loss")

			// (b) An in-place upgrade: the pre-upgrade snapshot is in the store when the node
			// starts rebooting.
			if err := c.simCluster().InstallKairosOperator(c.ctx); err != nil {
				t.Fatal(err)
			}
			reboot := c.watchFirstReboot(store, folder)
			requested := time.Now().Truncate(time.Second)
			c.update(func(s *controlplanev1.KairosControlPlaneSpec) {
				s.Version = inPlaceVersion
				s.KairosConfigSpec.Image = kairosImage(dist, inPlaceVersion)
			})
			upgraded := c.waitSettled(1, inPlaceVersion, 2*waitScale)
			if upgraded[0].UID != machines[0].UID {
				t.Fatalf("Machine %s was replaced by %s, not upgraded in place", machines[0].Name, upgraded[0].Name)
			}
			machines = upgraded
			at, snaps, err := reboot.result()
			if err != nil || at.IsZero() {
				t.Fatalf("the node's reboot was not seen (%v)", err)
			}
			var preUpgrade *etcdsnapshots.Snapshot
			for i, s := range snaps {
				if s.Kind == etcdsnapshots.KindPreUpgrade && s.Node == machines[0].Status.NodeRef.Name && !s.Time.Before(requested) && !s.Time.After(at) {
					preUpgrade = &snaps[i]
				}
			}
			if preUpgrade == nil {
				t.Fatalf("when the node started rebooting (%s) the store held no pre-upgrade snapshot of node %s taken since the upgrade was asked for (%s): %+v",
					at.Format(time.RFC3339), machines[0].Status.NodeRef.Name, requested.Format(time.RFC3339), snaps)
			}
			t.Logf("%s: pre-upgrade snapshot %s (%s) in the store when the node started rebooting at %s", dist, preUpgrade.Name,
				preUpgrade.Time.Format(time.TimeOnly), at.UTC().Format(time.TimeOnly))

			// The request is echoed in the status, and the node's on-demand snapshot is in the store
			// (status.etcd.snapshots shows the newest of any kind: with a schedule of every minute,
			// a scheduled one may stand there by the time the store is listed).
			var taken string
			framework.Eventually(t, 3*time.Minute, func() error {
				if got := c.get().Status.Etcd.SnapshotRequest.Value; got != "before-the-loss" {
					return fmt.Errorf("status.etcd.snapshotRequest is %q", got)
				}
				snaps := storeSnapshots(t, store, c.key.Name, folder)
				for _, s := range snaps {
					if s.Kind == etcdsnapshots.KindOnDemand && s.Time.Unix() > written && !s.Time.Before(asked.Truncate(time.Second)) {
						taken = s.Name
						return nil
					}
				}
				return fmt.Errorf("no on-demand snapshot taken since the request in the store: %+v", snaps)
			})
			t.Logf("%s: on-demand snapshot %s in the store (asked for %s ago)", dist, taken, time.Since(asked).Round(time.Second))
			store.SetReadOnly(true)
			if err := wl.Create(c.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after-snapshot"}}); err != nil {
				t.Fatal(err)
			}
			// The newest good snapshots: the on-demand snapshot and a scheduled one of the same
			// minute may have the same time; the node may restore either.
			var newest etcdsnapshots.Snapshot
			var newestNames []string
			for _, s := range storeSnapshots(t, store, c.key.Name, folder) {
				switch {
				case s.Time.After(newest.Time):
					newest, newestNames = s, []string{s.Name}
				case s.Time.Equal(newest.Time):
					newestNames = append(newestNames, s.Name)
				}
			}
			if newest.Time.Unix() <= written {
				t.Fatalf("the newest snapshot %s is older than %s", newest.Key, taken)
			}

			// (c) A corrupt object named as a newer snapshot of the node (written to the backend:
			// the bucket refuses writes through the protocol now), and the store unreachable
			// while the replacement boots.
			ext := ""
			if dist == bootstrapv1.DistributionK0s {
				ext = ".tar.gz"
			}
			corrupt := fmt.Sprintf("%s-%s-%d%s", c.key.Name, newest.Node, newest.Time.Unix()+1, ext)
			if _, err := store.Backend.PutObject(restoreBucket, folder+"/"+corrupt, nil, strings.NewReader("not a snapshot"), int64(len("not a snapshot")), nil); err != nil {
				t.Fatal(err)
			}
			if snaps := storeSnapshots(t, store, c.key.Name, folder); !slices.ContainsFunc(snaps, func(s etcdsnapshots.Snapshot) bool { return s.Name == corrupt && s.Time.After(newest.Time) }) {
				t.Fatalf("the corrupt object %s is not a snapshot newer than %s: %+v", corrupt, newest.Name, snaps)
			}
			store.SetUnreachable(true)

			// The only VM is destroyed on the hypervisor.
			gone := machines[0]
			start := time.Now()
			if err := c.h.Client.Delete(c.ctx, &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: gone.Namespace, Name: gone.Spec.InfrastructureRef.Name}}); err != nil {
				t.Fatal(err)
			}
			// No MachineHealthCheck: a single-node site's lost node reports nothing (the cluster's
			// API server went with it, so Cluster API's health check cannot read the cluster). The
			// control plane remediates its only Machine on the infrastructure's word, which Cluster
			// API relays as InfrastructureReady False, reason InfrastructureDeleted.
			framework.Eventually(t, waitScale, func() error {
				m := c.machineByName(gone.Name)
				if m != nil && m.DeletionTimestamp.IsZero() {
					return fmt.Errorf("Machine %s is not remediated yet (%s)", gone.Name, c.kcpProblems())
				}
				// The control plane records the remediation in the status patch that ends the
				// reconcile that deleted the Machine.
				if last := c.get().Status.LastRemediation; last.Machine != gone.Name {
					return fmt.Errorf("Machine %s is deleting, but the control plane's last remediation is %+v", gone.Name, last)
				}
				return nil
			})
			// The replacement's node waits for the store, and the control plane says why.
			var waiting string
			framework.Eventually(t, simnode.NodeMonitorGracePeriod+waitScale, func() error {
				ms, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(ms) != 1 || ms[0].Name == gone.Name {
					return fmt.Errorf("control-plane Machines %s (%s)", machineList(ms), c.kcpProblems())
				}
				n := c.Node(ms[0].Spec.InfrastructureRef.Name)
				if n == nil {
					return fmt.Errorf("no node for the replacement %s yet", ms[0].Name)
				}
				st := n.Status()
				if st.Phase != simnode.PhaseBooting || !strings.Contains(st.Message, "restoring etcd") || !strings.Contains(st.Message, "waits for the store") {
					return fmt.Errorf("the replacement's node is %s/%s: %s", st.Phase, st.Reason, st.Message)
				}
				waiting = st.Message
				return nil
			})
			c.waitCondition(controlplanev1.EtcdRestoredCondition, metav1.ConditionFalse, "the store cannot be listed from the management cluster", waitScale)
			cond := conditions.Get(c.get(), controlplanev1.EtcdRestoredCondition)
			if cond.Reason != controlplanev1.EtcdRestoringReason || !strings.Contains(cond.Message, "s3://"+restoreBucket+"/"+folder+"/") {
				t.Errorf("EtcdRestored while the store is unreachable: %+v", cond)
			}
			t.Logf("%s: the replacement waits for the store (node: %q); EtcdRestored: %s", dist, lastLine(waiting), cond.Message)
			store.SetUnreachable(false)

			var replacement clusterv1.Machine
			framework.Eventually(t, 2*waitScale, func() error {
				ms, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(ms) != 1 || ms[0].Name == gone.Name || ms[0].Status.Phase != string(clusterv1.MachinePhaseRunning) {
					return fmt.Errorf("control-plane Machines %s (%s)%s", machineList(ms), c.kcpProblems(), c.nodeStatuses(ms))
				}
				replacement = ms[0]
				cond := conditions.Get(c.get(), controlplanev1.EtcdRestoredCondition)
				if cond == nil || cond.Status != metav1.ConditionTrue {
					return fmt.Errorf("EtcdRestored is %+v", cond)
				}
				return nil
			})
			t.Logf("%s: Machine %s replaced by %s, restored, %s after its VM was deleted", dist, gone.Name, replacement.Name, time.Since(start).Round(time.Second))
			cond = conditions.Get(c.get(), controlplanev1.EtcdRestoredCondition)
			if !slices.ContainsFunc(newestNames, func(name string) bool {
				return strings.HasPrefix(cond.Message, "Machine "+replacement.Name+" restored etcd snapshot "+name+" (taken ")
			}) {
				t.Errorf("EtcdRestored says %q, want a newest good snapshot %q (not the corrupt %s)", cond.Message, newestNames, corrupt)
			}
			if now, err := c.Endpoint(c.ctx); err != nil || now != endpoint {
				t.Errorf("the endpoint is %s (%v), was %s", now, err, endpoint)
			}

			// The kubeconfig from before (the cluster's CA and client certificate) reaches the
			// restored cluster.
			wl, err = client.New(cfg, client.Options{Scheme: wl.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, time.Minute, func() error {
				return wl.Get(c.ctx, client.ObjectKey{Namespace: "default", Name: "before-snapshot"}, &corev1.ConfigMap{})
			})
			if err := wl.Get(c.ctx, client.ObjectKey{Namespace: "default", Name: "after-snapshot"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Errorf("the restored cluster has the ConfigMap written after the snapshot (%v)", err)
			}
			// The token issued before authenticates: the service-account keys are the same.
			tokenCfg := rest.AnonymousClientConfig(cfg)
			tokenCfg.BearerToken = tr.Status.Token
			tc, err := client.New(tokenCfg, client.Options{Scheme: wl.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			review := &authenticationv1.SelfSubjectReview{}
			if err := tc.Create(c.ctx, review); err != nil {
				t.Fatalf("the service-account token issued before the loss: %v", err)
			}
			if got := review.Status.UserInfo.Username; got != "system:serviceaccount:default:probe" {
				t.Errorf("the token authenticates as %q", got)
			}
		})
	}
}

// storeSnapshots reads the store's snapshots of a cluster as the control plane does
// (controlplane/etcdsnapshots: their names, by cluster and node, with the time that ends them).
func storeSnapshots(t *testing.T, s *objectstore.Store, cluster, folder string) []etcdsnapshots.Snapshot {
	t.Helper()
	out, err := readSnapshots(s, cluster, folder)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readSnapshots(s *objectstore.Store, cluster, folder string) ([]etcdsnapshots.Snapshot, error) {
	keys, err := s.Keys(restoreBucket)
	if err != nil {
		return nil, err
	}
	var out []etcdsnapshots.Snapshot
	for _, k := range keys {
		if snap, ok := etcdsnapshots.Parse(cluster, folder, etcdsnapshots.Object{Key: k}); ok {
			out = append(out, snap)
		}
	}
	return out, nil
}

// rebootWatch holds what the store held when a node of the cluster first started rebooting.
type rebootWatch struct {
	mu    sync.Mutex
	at    time.Time
	snaps []etcdsnapshots.Snapshot
	err   error
	stop  func()
}

// watchFirstReboot reads the store's snapshots of the cluster when one of its nodes first
// reports that it is rebooting: the node's status event is delivered synchronously, before the
// reboot stops anything on the node (simnode reboot), so what the store holds then is what it
// held before the reboot, however fast or slow the machine.
func (c *cpCluster) watchFirstReboot(store *objectstore.Store, folder string) *rebootWatch {
	w := &rebootWatch{}
	reg := c.h.Registry
	w.stop = reg.Subscribe(func(e simnode.NodeEvent) {
		if e.Namespace != c.key.Namespace {
			return
		}
		n := reg.Node(e.ProviderID)
		if n == nil {
			return
		}
		if st := n.Status(); st.Phase != simnode.PhaseBooting || st.Reason != simnode.ReasonRebooting {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.at.IsZero() {
			return
		}
		w.at = time.Now()
		w.snaps, w.err = readSnapshots(store, c.key.Name, folder)
	})
	c.t.Cleanup(w.stop)
	return w
}

// result stops the watch and says when the first reboot began and what the store held then.
func (w *rebootWatch) result() (time.Time, []etcdsnapshots.Snapshot, error) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at, w.snaps, w.err
}

// nodeStatuses describes the simulated nodes of Machines (their journal, in reality), for
// failure messages.
func (c *cpCluster) nodeStatuses(ms []clusterv1.Machine) string {
	var out string
	for _, m := range ms {
		if n := c.Node(m.Spec.InfrastructureRef.Name); n != nil {
			st := n.Status()
			out += fmt.Sprintf("; node of %s: %s/%s: %s", m.Name, st.Phase, st.Reason, st.Message)
		}
	}
	return out
}

// lastLine is the last non-empty line of a message.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func machineList(ms []clusterv1.Machine) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+" "+m.Status.Phase)
	}
	return strings.Join(out, ", ")
}
