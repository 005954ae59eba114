package lifecycle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestSingleNodeRestoresFromSnapshot is issue 34's scenario (a), through Cluster API: a
// single-node control plane with etcd snapshots to an S3 store the test runs (TLS, Signature V4)
// loses its only VM on the hypervisor. The MachineHealthCheck marks the Machine once its Node goes
// Unknown, the control plane remediates its last Machine because it has snapshots, and the
// replacement restores the newest snapshot before Kubernetes starts (the rendered restore, real
// etcd restore): the cluster keeps its endpoint, its CA (the kubeconfig from before works) and
// its service-account keys (a token issued before authenticates), holds an object written before
// the snapshot and not one written after it, and EtcdRestored names the snapshot. The store is
// made read-only right after the snapshot, so that no later scheduled snapshot can hold the
// object written after it, whatever the machine's speed.
func TestSingleNodeRestoresFromSnapshot(t *testing.T) {
	t.Parallel()
	for _, dist := range distributions {
		t.Run(string(dist), func(t *testing.T) {
			slots.Parallel(t)
			store := objectstore.Start(t, objectstore.Options{Buckets: []string{restoreBucket}, Region: "eu-west-1"})
			c := newControlPlaneCluster(t, dist, cpOptions{replicas: 1, mutate: func(s *controlplanev1.KairosControlPlaneSpec) {
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
			// A single-node site's lost node cannot report anything: the cluster's API server went
			// with it, so no Node turns Unknown. The health check that remediates it looks at the
			// Machine: its infrastructure is gone.
			if err := c.h.Client.Create(c.ctx, &clusterv1.MachineHealthCheck{
				ObjectMeta: metav1.ObjectMeta{Namespace: c.key.Namespace, Name: "site"},
				Spec: clusterv1.MachineHealthCheckSpec{
					ClusterName: c.key.Name,
					Selector:    metav1.LabelSelector{MatchLabels: map[string]string{controlplanev1.ControlPlaneNameLabel: c.key.Name}},
					Checks: clusterv1.MachineHealthCheckChecks{UnhealthyMachineConditions: []clusterv1.UnhealthyMachineCondition{{
						Type: clusterv1.MachineInfrastructureReadyCondition, Status: metav1.ConditionFalse, TimeoutSeconds: ptr.To[int32](5),
					}}},
				},
			}); err != nil {
				t.Fatal(err)
			}
			cfg, err := c.WorkloadConfig(c.ctx)
			if err != nil {
				t.Fatal(err)
			}
			wl, err := c.WorkloadClient(c.ctx)
			if err != nil {
				t.Fatal(err)
			}

			// A service-account token issued before the snapshot, and an object written before it.
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
			folder := c.key.Namespace + "/" + c.key.Name // <prefix>/<namespace>/<cluster>, no prefix
			var taken string
			framework.Eventually(t, 3*time.Minute, func() error {
				snaps := storeSnapshots(t, store, c.key.Name, folder)
				for _, s := range snaps {
					if s.Time.Unix() > written {
						taken = s.Key
						return nil
					}
				}
				return fmt.Errorf("no snapshot taken after the ConfigMap was written (%d): %+v", written, snaps)
			})
			store.SetReadOnly(true)
			if err := wl.Create(c.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "after-snapshot"}}); err != nil {
				t.Fatal(err)
			}
			var newest etcdsnapshots.Snapshot
			for _, s := range storeSnapshots(t, store, c.key.Name, folder) {
				if s.Time.After(newest.Time) {
					newest = s
				}
			}
			if newest.Time.Unix() <= written {
				t.Fatalf("the newest snapshot %s is older than %s", newest.Key, taken)
			}

			// The only VM is destroyed on the hypervisor.
			gone := machines[0]
			start := time.Now()
			if err := c.h.Client.Delete(c.ctx, &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: gone.Namespace, Name: gone.Spec.InfrastructureRef.Name}}); err != nil {
				t.Fatal(err)
			}
			var replacement clusterv1.Machine
			framework.Eventually(t, simnode.NodeMonitorGracePeriod+2*waitScale, func() error {
				ms, err := c.controlPlaneMachines()
				if err != nil {
					return err
				}
				if len(ms) != 1 || ms[0].Name == gone.Name || ms[0].Status.Phase != string(clusterv1.MachinePhaseRunning) {
					return fmt.Errorf("control-plane Machines %s (%s)", machineList(ms), c.kcpProblems())
				}
				replacement = ms[0]
				cond := conditions.Get(c.get(), controlplanev1.EtcdRestoredCondition)
				if cond == nil || cond.Status != metav1.ConditionTrue {
					return fmt.Errorf("EtcdRestored is %+v", cond)
				}
				return nil
			})
			t.Logf("%s: Machine %s replaced by %s, restored, %s after its VM was deleted", dist, gone.Name, replacement.Name, time.Since(start).Round(time.Second))
			cond := conditions.Get(c.get(), controlplanev1.EtcdRestoredCondition)
			if !strings.HasPrefix(cond.Message, "Machine "+replacement.Name+" restored etcd snapshot "+newest.Name+" (taken ") {
				t.Errorf("EtcdRestored says %q, want the newest snapshot %s", cond.Message, newest.Name)
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
	keys, err := s.Keys(restoreBucket)
	if err != nil {
		t.Fatal(err)
	}
	var out []etcdsnapshots.Snapshot
	for _, k := range keys {
		if snap, ok := etcdsnapshots.Parse(cluster, folder, etcdsnapshots.Object{Key: k}); ok {
			out = append(out, snap)
		}
	}
	return out
}

func machineList(ms []clusterv1.Machine) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+" "+m.Status.Phase)
	}
	return strings.Join(out, ", ")
}
