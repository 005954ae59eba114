package main

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/etcdsnapshots"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/objectstore"
)

// The restore demonstration (-restore, make sandbox RESTORE=1; README "Backups and restore"):
// the demo cluster's control plane takes etcd snapshots every minute to an S3 object store that
// the sandbox runs (test/objectstore: TLS, Signature V4 keys), and once the cluster is ready the
// sandbox writes a ConfigMap, asks for an on-demand snapshot and waits for it in the store,
// destroys the only control-plane VM, and reads the ConfigMap back from the
// cluster its replacement restored.
const (
	restoreBucket    = "sandbox-snapshots"
	restoreSecret    = "sandbox-snapshots-s3"
	restoreConfigMap = "written-before-the-loss"
)

type restoreDemo struct{ store *objectstore.Store }

func startRestoreDemo() (*restoreDemo, error) {
	store, err := objectstore.New(objectstore.Options{Buckets: []string{restoreBucket}})
	if err != nil {
		return nil, fmt.Errorf("starting the object store: %w", err)
	}
	return &restoreDemo{store: store}, nil
}

func (d *restoreDemo) stop() { d.store.Close() }

// withSnapshots returns the template's objects with spec.etcd.snapshots set on the
// KairosControlPlane (what a user adds to the template), and first the credentials Secret it
// names.
func (d *restoreDemo) withSnapshots(objs []unstructured.Unstructured, namespace string) ([]unstructured.Unstructured, error) {
	secret := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: restoreSecret},
		StringData: map[string]string{
			bootstrapv1.EtcdSnapshotAccessKeyIDKey: d.store.AccessKeyID, bootstrapv1.EtcdSnapshotSecretAccessKeyKey: d.store.SecretAccessKey,
		},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(secret)
	if err != nil {
		return nil, err
	}
	out := []unstructured.Unstructured{{Object: u}}
	for _, obj := range objs {
		if obj.GetKind() == "KairosControlPlane" {
			kcp := &controlplanev1.KairosControlPlane{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, kcp); err != nil {
				return nil, err
			}
			kcp.Spec.Etcd.Snapshots = &bootstrapv1.EtcdSnapshots{
				Schedule: "* * * * *", Retention: ptr.To[int32](3),
				S3: bootstrapv1.EtcdSnapshotS3{
					Endpoint: d.store.Endpoint, Bucket: restoreBucket, Region: d.store.Region, CABundle: string(d.store.CAPEM),
					CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: restoreSecret},
				},
			}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kcp)
			if err != nil {
				return nil, err
			}
			obj = unstructured.Unstructured{Object: m}
		}
		out = append(out, obj)
	}
	return out, nil
}

// run demonstrates the restore on the ready cluster and returns once the object written before
// the last snapshot is read back from the restored cluster.
func (d *restoreDemo) run(ctx context.Context, h *harness.Harness, clusterName string, w io.Writer) error {
	ns := metav1.NamespaceDefault
	secret := &corev1.Secret{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName + "-kubeconfig"}, secret); err != nil {
		return err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["value"])
	if err != nil {
		return err
	}
	wl, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	say("Restore: kubectl --kubeconfig %s.kubeconfig create configmap %s", clusterName, restoreConfigMap)
	if err := wl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: restoreConfigMap}}); err != nil {
		return err
	}
	written := time.Now()
	// An on-demand snapshot, asked for with the annotation (the schedule, every minute, would
	// take one too): the node takes it within a minute.
	request := written.UTC().Format("20060102T150405Z")
	kcpKey := client.ObjectKey{Namespace: ns, Name: clusterName + "-control-plane"}
	say("Restore: kubectl annotate kairoscontrolplane %s %s=%s", kcpKey.Name, controlplanev1.EtcdSnapshotRequestAnnotation, request)
	kcp := &controlplanev1.KairosControlPlane{}
	if err := h.Client.Get(ctx, kcpKey, kcp); err != nil {
		return err
	}
	patch := client.MergeFrom(kcp.DeepCopy())
	kcp.Annotations = labels.Merge(kcp.Annotations, map[string]string{controlplanev1.EtcdSnapshotRequestAnnotation: request})
	if err := h.Client.Patch(ctx, kcp, patch); err != nil {
		return err
	}
	folder := ns + "/" + clusterName
	var snap etcdsnapshots.Snapshot
	if err := poll(ctx, func() (bool, error) {
		keys, err := d.store.Keys(restoreBucket)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if s, ok := etcdsnapshots.Parse(clusterName, folder, etcdsnapshots.Object{Key: k}); ok && s.Kind == etcdsnapshots.KindOnDemand && !s.Time.Before(written.Truncate(time.Second)) {
				snap = s
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	say("Restore: on-demand snapshot %s is in s3://%s/%s", snap.Name, restoreBucket, snap.Key)

	lost, err := controlPlaneMachine(ctx, h.Client, clusterName)
	if err != nil {
		return err
	}
	say("Restore: the only control-plane VM is destroyed: kubectl delete kairossimmachine %s", lost.Spec.InfrastructureRef.Name)
	if err := h.Client.Delete(ctx, &infrav1.KairosSimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lost.Spec.InfrastructureRef.Name}}); err != nil {
		return err
	}
	start := time.Now()
	if err := poll(ctx, func() (bool, error) {
		m := &clusterv1.Machine{}
		err := h.Client.Get(ctx, client.ObjectKeyFromObject(lost), m)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && !m.DeletionTimestamp.IsZero(), err
	}); err != nil {
		return err
	}
	say("Restore: Machine %s is remediated by the control plane: Cluster API says its KairosSimMachine was deleted (no MachineHealthCheck could read a cluster whose API server went with its node)", lost.Name)
	last := ""
	if err := poll(ctx, func() (bool, error) {
		if err := h.Client.Get(ctx, kcpKey, kcp); err != nil {
			return false, err
		}
		m, err := controlPlaneMachine(ctx, h.Client, clusterName)
		status := "no control-plane Machine"
		if err == nil {
			status = "Machine " + m.Name
			if m.Status.Phase != "" {
				status += " " + m.Status.Phase
			}
		}
		if c := conditions.Get(kcp, controlplanev1.EtcdRestoredCondition); c != nil {
			status += fmt.Sprintf("; EtcdRestored %s %s", c.Status, c.Reason)
		}
		if status != last {
			fmt.Fprintln(w, "    "+status)
			last = status
		}
		return err == nil && m.UID != lost.UID && m.Status.Phase == string(clusterv1.MachinePhaseRunning) &&
			conditions.IsTrue(kcp, controlplanev1.EtcdRestoredCondition), nil
	}); err != nil {
		return err
	}
	say("Restore: %s", conditions.Get(kcp, controlplanev1.EtcdRestoredCondition).Message)
	// The kubeconfig from before the loss: same endpoint, same CA, same client certificate.
	if err := poll(ctx, func() (bool, error) {
		return wl.Get(ctx, client.ObjectKey{Namespace: ns, Name: restoreConfigMap}, &corev1.ConfigMap{}) == nil, nil
	}); err != nil {
		return err
	}
	say("Restore: ConfigMap %s is back, read with the kubeconfig from before the loss, %s after the VM was destroyed", restoreConfigMap, time.Since(start).Round(time.Second))
	return nil
}

// poll calls done every second until it says true, fails, or ctx ends.
func poll(ctx context.Context, done func() (bool, error)) error {
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
