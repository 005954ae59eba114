package bootstrap_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
	"github.com/kairos-capi/kairos-capi/test/cloudconfig"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

const (
	waitShort = 20 * time.Second
	version   = "v1.31.2"
)

func controlPlane(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleControlPlane, Distribution: dist, UserPassword: "s3cret-for-tests"}
}

func worker(dist bootstrapv1.Distribution) bootstrapv1.KairosConfigSpec {
	return bootstrapv1.KairosConfigSpec{Role: bootstrapv1.RoleWorker, Distribution: dist, UserPassword: "s3cret-for-tests"}
}

func (tc *testCluster) config(m *machine) *bootstrapv1.KairosConfig {
	tc.t.Helper()
	c := &bootstrapv1.KairosConfig{}
	if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(m.config), c); err != nil {
		tc.t.Fatal(err)
	}
	return c
}

// waitForReason waits until DataSecretAvailable is false with the given reason, while no
// data exists.
func (tc *testCluster) waitForReason(m *machine, reason string) *metav1.Condition {
	tc.t.Helper()
	return tc.waitForCondition(m, reason, false)
}

// waitForCondition waits until DataSecretAvailable is false with the given reason.
func (tc *testCluster) waitForCondition(m *machine, reason string, dataCreated bool) *metav1.Condition {
	tc.t.Helper()
	var cond *metav1.Condition
	framework.Eventually(tc.t, waitShort, func() error {
		c := &bootstrapv1.KairosConfig{}
		if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(m.config), c); err != nil {
			return err
		}
		cond = conditions.Get(c, bootstrapv1.DataSecretAvailableCondition)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason {
			return fmt.Errorf("DataSecretAvailable is %+v, want False/%s", cond, reason)
		}
		if ptr.Deref(c.Status.Initialization.DataSecretCreated, false) != dataCreated {
			return fmt.Errorf("dataSecretCreated is %v, want %v", !dataCreated, dataCreated)
		}
		return nil
	})
	return cond
}

// waitForData waits for the bootstrap data, checks the Secret against the contract and
// returns the document.
func (tc *testCluster) waitForData(m *machine) (*corev1.Secret, []byte) {
	tc.t.Helper()
	t := tc.t
	var config *bootstrapv1.KairosConfig
	framework.Eventually(t, waitShort, func() error {
		config = tc.config(m)
		if !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
			return fmt.Errorf("no data yet: %+v", conditions.Get(config, bootstrapv1.DataSecretAvailableCondition))
		}
		if config.Status.ObservedGeneration != config.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", config.Status.ObservedGeneration, config.Generation)
		}
		return nil
	})
	if config.Status.DataSecretName != config.Name {
		t.Fatalf("dataSecretName %q, want the deterministic %q", config.Status.DataSecretName, config.Name)
	}
	for _, typ := range []string{bootstrapv1.ReadyCondition, bootstrapv1.DataSecretAvailableCondition} {
		if !conditions.IsTrue(config, typ) {
			t.Errorf("condition %s is not true: %+v", typ, conditions.Get(config, typ))
		}
	}
	if conditions.IsTrue(config, clusterv1.PausedCondition) {
		t.Error("Paused condition is true on a running config")
	}

	s := &corev1.Secret{}
	if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: config.Namespace, Name: config.Status.DataSecretName}, s); err != nil {
		t.Fatal(err)
	}
	if s.Type != clusterv1.ClusterSecretType {
		t.Errorf("secret type %q, want %q", s.Type, clusterv1.ClusterSecretType)
	}
	if s.Labels[clusterv1.ClusterNameLabel] != tc.cluster.Name {
		t.Errorf("secret cluster-name label %q, want %q", s.Labels[clusterv1.ClusterNameLabel], tc.cluster.Name)
	}
	if !metav1.IsControlledBy(s, config) {
		t.Errorf("secret is not controlled by its KairosConfig: %+v", s.OwnerReferences)
	}
	if len(s.Data) != 1 || len(s.Data["value"]) == 0 {
		t.Errorf("secret must hold exactly one key, value; has %d keys", len(s.Data))
	}
	if err := cloudconfig.Check(s.Data["value"]); err != nil {
		t.Errorf("a Kairos node would mishandle the document: %v", err)
	}
	return s, s.Data["value"]
}

// TestContractWorkflow walks a first control-plane node through every wait of the contract.
func TestContractWorkflow(t *testing.T) {
	for _, dist := range []bootstrapv1.Distribution{bootstrapv1.DistributionK0s, bootstrapv1.DistributionK3s} {
		t.Run(string(dist), func(t *testing.T) {
			tc := newCluster(t, newNamespace(t), "c1")
			cp := tc.addMachine("cp-0", controlPlane(dist), version)

			tc.waitForReason(cp, bootstrapv1.WaitingForClusterInfrastructureReason)
			tc.update(func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = ptr.To(true) })
			tc.waitForReason(cp, bootstrapv1.WaitingForControlPlaneEndpointReason)
			tc.update(func(c *clusterv1.Cluster) {
				c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
			})

			_, doc := tc.waitForData(cp)
			if !bytes.Contains(doc, []byte("10.0.0.10")) {
				t.Error("the document does not mention the control-plane endpoint")
			}
			files, err := cloudconfig.RenderedFiles(doc)
			if err != nil {
				t.Fatal(err)
			}
			// The cluster CA the node receives is the one stored as <cluster>-ca.
			ca := &corev1.Secret{}
			if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: tc.cluster.Namespace, Name: "c1-ca"}, ca); err != nil {
				t.Fatal(err)
			}
			if !containsValue(files, string(ca.Data["tls.crt"])) {
				t.Error("the node does not receive the cluster CA stored in c1-ca")
			}
			for _, suffix := range []string{"ca", "etcd", "proxy", "sa"} {
				s := &corev1.Secret{}
				if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: tc.cluster.Namespace, Name: "c1-" + suffix}, s); err != nil {
					t.Fatalf("cluster secret c1-%s: %v", suffix, err)
				}
				if s.Type != clusterv1.ClusterSecretType || s.Labels[clusterv1.ClusterNameLabel] != "c1" {
					t.Errorf("c1-%s: type %q labels %v", suffix, s.Type, s.Labels)
				}
			}
		})
	}
}

func containsValue(m map[string]string, v string) bool {
	for _, got := range m {
		if got == v {
			return true
		}
	}
	return false
}

// TestInitLock lets exactly one control-plane Machine create the cluster.
func TestInitLock(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "lock")
	tc.provision()
	first := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version)
	tc.waitForData(first)
	second := tc.addMachine("cp-1", controlPlane(bootstrapv1.DistributionK3s), version)
	cond := tc.waitForReason(second, bootstrapv1.WaitingForInitLockReason)
	if !strings.Contains(cond.Message, "cp-0") {
		t.Errorf("wait message does not name the initializing Machine: %q", cond.Message)
	}

	tc.initialize()
	_, doc := tc.waitForData(second)
	if !bytes.Contains(doc, []byte("--server")) || bytes.Contains(doc, []byte("--cluster-init")) {
		t.Error("the second k3s server does not join the first")
	}
	framework.Eventually(t, waitShort, func() error {
		cm := &corev1.ConfigMap{}
		err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: tc.cluster.Namespace, Name: "lock-kairos-init-lock"}, cm)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("init lock still exists after initialization: %v", err)
	})
}

// TestWorkerJoinK0s: workers wait for the control plane, then get a bootstrap token created in
// the workload cluster, refreshed until the node joins and then left to expire.
func TestWorkerJoinK0s(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "wk")
	tc.provision()
	w := tc.addMachine("worker-0", worker(bootstrapv1.DistributionK0s), version)
	tc.waitForReason(w, bootstrapv1.WaitingForControlPlaneInitializedReason)

	tc.initialize()
	tc.waitForReason(w, bootstrapv1.WaitingForClusterCertificatesReason)
	tc.createCA() // as a control-plane provider would
	tc.waitForReason(w, bootstrapv1.WaitingForJoinTokenReason)
	tc.connectWorkload()

	data, doc := tc.waitForData(w)
	id := data.Annotations["bootstrap.cluster.x-k8s.io/kairos-token-id"]
	if id == "" {
		t.Fatal("the data Secret does not record its bootstrap token id")
	}
	joinToken := findJoinToken(t, doc)
	info, err := token.ParseK0sJoinToken(joinToken)
	if err != nil {
		t.Fatalf("the node's token file is not a k0s join token: %v", err)
	}
	if info.Token.ID != id || info.Server != "https://10.0.0.10:6443" {
		t.Errorf("join token id %q server %q, want %q and the endpoint", info.Token.ID, info.Server, id)
	}

	ctx := framework.Context(t)
	tokenSecret := func() (*corev1.Secret, error) {
		s := &corev1.Secret{}
		err := workload.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + id}, s)
		return s, err
	}
	s, err := tokenSecret()
	if err != nil {
		t.Fatalf("bootstrap token not created in the workload cluster: %v", err)
	}
	if string(s.Data["token-secret"]) != info.Token.Secret || s.Type != corev1.SecretTypeBootstrapToken {
		t.Error("the workload token does not match the node's join token")
	}
	if string(s.Data["usage-bootstrap-authentication"]) != "true" {
		t.Error("the worker token cannot authenticate the kubelet")
	}

	// Refreshed while the Machine has no node.
	first := string(s.Data["expiration"])
	framework.Eventually(t, 3*tokenTTL, func() error {
		s, err := tokenSecret()
		if err != nil {
			return err
		}
		if string(s.Data["expiration"]) == first {
			return fmt.Errorf("expiration still %s", first)
		}
		return nil
	})

	// Left alone once the node joined.
	m := w.m.DeepCopy()
	if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	before := m.DeepCopy()
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "worker-0"}
	if err := tc.c.Status().Patch(tc.ctx, m, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	// The reconcile that sees the node removes the JoinTokenAvailable condition and refreshes
	// nothing; reconciles of one config run one at a time, so once the condition is gone no
	// refresh is in flight and none follows.
	framework.Eventually(t, 3*tokenTTL, func() error {
		config := &bootstrapv1.KairosConfig{}
		if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(w.config), config); err != nil {
			return err
		}
		if c := conditions.Get(config, bootstrapv1.JoinTokenAvailableCondition); c != nil {
			return fmt.Errorf("the config still says its token is needed: %+v", c)
		}
		return nil
	})
	s, err = tokenSecret()
	if err != nil {
		t.Fatal(err)
	}
	settled := string(s.Data["expiration"])
	framework.Consistently(t, tokenTTL, func() error {
		s, err := tokenSecret()
		if err != nil {
			return err
		}
		if string(s.Data["expiration"]) != settled {
			return fmt.Errorf("token refreshed after the node joined")
		}
		return nil
	})
}

// findJoinToken returns the token file a k0s or k3s node joins with (--token-file).
func findJoinToken(t *testing.T, doc []byte) string {
	t.Helper()
	return renderedFile(t, doc, render.K0sTokenPath, render.K3sTokenPath)
}

// renderedFile returns the content of the first of paths the document writes.
func renderedFile(t *testing.T, doc []byte, paths ...string) string {
	t.Helper()
	files, err := cloudconfig.RenderedFiles(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if content, ok := files[p]; ok {
			return strings.TrimSpace(content)
		}
	}
	t.Fatalf("none of %v among %v", paths, keys(files))
	return ""
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestControlPlaneJoinK0s gives joining controllers a controller token for the k0s join API.
func TestControlPlaneJoinK0s(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "cpj")
	tc.provision()
	tc.waitForData(tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK0s), version))
	tc.initialize()
	tc.connectWorkload()
	_, doc := tc.waitForData(tc.addMachine("cp-1", controlPlane(bootstrapv1.DistributionK0s), version))
	info, err := token.ParseK0sJoinToken(findJoinToken(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	if info.Server != "https://10.0.0.10:9443" {
		t.Errorf("controller token points at %s, want the k0s join API on 9443", info.Server)
	}
	s := &corev1.Secret{}
	if err := workload.Client.Get(framework.Context(t), client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + info.Token.ID}, s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data["usage-controller-join"]) != "true" {
		t.Error("controller token lacks usage-controller-join")
	}
}

// TestWorkerK3sAndOverride: k3s workers use the cluster's agent token, never the server token;
// servers get both; an explicit override wins.
func TestWorkerK3sAndOverride(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "k3")
	tc.provision()
	_, serverDoc := tc.waitForData(tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version))
	tc.initialize()

	clusterToken := &corev1.Secret{}
	if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: ns, Name: "k3-k3s-token"}, clusterToken); err != nil {
		t.Fatal(err)
	}
	agentToken := string(clusterToken.Data["agent-token"])
	if agentToken == "" {
		t.Fatal("the cluster token Secret holds no agent token")
	}
	if got := renderedFile(t, serverDoc, render.K3sAgentTokenPath); got != agentToken {
		t.Error("the k3s server does not accept the cluster's agent token")
	}
	_, doc := tc.waitForData(tc.addMachine("w-0", worker(bootstrapv1.DistributionK3s), version))
	if got := findJoinToken(t, doc); got != agentToken {
		t.Error("the k3s worker does not use the cluster's agent token")
	}
	if bytes.Contains(doc, clusterToken.Data["value"]) {
		t.Error("the k3s worker's data holds the server token")
	}

	otherCA, err := pki.NewCA("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	overrideToken, err := token.NewK3sAgentToken(otherCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	override := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "my-token", Namespace: ns},
		Data:       map[string][]byte{"token": []byte(overrideToken)},
	}
	spec := worker(bootstrapv1.DistributionK3s)
	spec.WorkerTokenSecretRef = &bootstrapv1.SecretKeyReference{Name: "my-token", Key: "token"}
	w1 := tc.addMachine("w-1", spec, version)
	tc.waitForReason(w1, bootstrapv1.WaitingForReferencedSecretReason)
	if err := tc.c.Create(tc.ctx, override); err != nil {
		t.Fatal(err)
	}
	_, doc = tc.waitForData(w1)
	if got := findJoinToken(t, doc); got != overrideToken {
		t.Errorf("override token not used, got %q", got)
	}
}

// TestRestoreCreatesTheClusterAgain: a control-plane config that restores an etcd snapshot,
// added after the cluster was initialized (its only node lost), gets the data of the node that
// creates the cluster, not a join: --cluster-init, the cluster's own CA and server token (which
// decrypt k3s' bootstrap data in the snapshot), and the restore before k3s first starts. A
// config without restore added at the same time joins, as before.
func TestRestoreCreatesTheClusterAgain(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "rs")
	tc.provision()
	tc.waitForData(tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version))
	tc.initialize()

	creds := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{
			bootstrapv1.EtcdSnapshotAccessKeyIDKey: []byte("AKIARESTORE"), bootstrapv1.EtcdSnapshotSecretAccessKeyKey: []byte("restore-secret"),
		},
	}
	if err := tc.c.Create(tc.ctx, creds); err != nil {
		t.Fatal(err)
	}
	spec := controlPlane(bootstrapv1.DistributionK3s)
	spec.EtcdSnapshots = &bootstrapv1.EtcdSnapshots{
		S3: bootstrapv1.EtcdSnapshotS3{
			Endpoint: "s3.example.com", Bucket: "site-backups",
			CredentialsSecret: bootstrapv1.S3CredentialsSecretReference{Name: "s3"},
		},
		Restore: bootstrapv1.EtcdSnapshotRestoreNewest,
	}
	_, doc := tc.waitForData(tc.addMachine("cp-1", spec, version))
	for _, want := range []string{"--cluster-init", "ExecStartPre=/bin/sh " + render.EtcdRestoreScript, "--cluster-reset-restore-path="} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("the restoring node's data lacks %q", want)
		}
	}
	if bytes.Contains(doc, []byte("--server=")) {
		t.Error("the restoring node joins the lost cluster instead of creating it again")
	}
	clusterToken := &corev1.Secret{}
	if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: ns, Name: "rs-k3s-token"}, clusterToken); err != nil {
		t.Fatal(err)
	}
	if got := renderedFile(t, doc, render.K3sTokenPath); got != strings.TrimSpace(string(clusterToken.Data["value"])) {
		t.Error("the restoring node does not get the cluster's server token")
	}
	ca := &corev1.Secret{}
	if err := tc.c.Get(tc.ctx, client.ObjectKey{Namespace: ns, Name: "rs-ca"}, ca); err != nil {
		t.Fatal(err)
	}
	if got := renderedFile(t, doc, render.K3sTLSDir+"/server-ca.crt"); got != strings.TrimSpace(string(ca.Data["tls.crt"])) {
		t.Error("the restoring node does not get the cluster's CA")
	}

	_, joinDoc := tc.waitForData(tc.addMachine("cp-2", controlPlane(bootstrapv1.DistributionK3s), version))
	if !bytes.Contains(joinDoc, []byte("--server=")) || bytes.Contains(joinDoc, []byte("--cluster-init")) {
		t.Error("a control-plane node without restore does not join the initialized cluster")
	}
}

// TestPause: a paused Cluster or annotation stops rendering and reports Paused.
func TestPause(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "p")
	tc.update(func(c *clusterv1.Cluster) { c.Spec.Paused = ptr.To(true) })
	tc.provision()
	cp := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK0s), version)
	framework.Eventually(t, waitShort, func() error {
		if !conditions.IsTrue(tc.config(cp), clusterv1.PausedCondition) {
			return fmt.Errorf("not paused")
		}
		return nil
	})
	framework.Consistently(t, 3*time.Second, func() error {
		if ptr.Deref(tc.config(cp).Status.Initialization.DataSecretCreated, false) {
			return fmt.Errorf("rendered while paused")
		}
		return nil
	})
	tc.update(func(c *clusterv1.Cluster) { c.Spec.Paused = ptr.To(false) })
	tc.waitForData(cp)

	// The annotation pauses one object.
	w := tc.addMachine("w-0", worker(bootstrapv1.DistributionK0s), version)
	c := tc.config(w)
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
	if err := tc.c.Patch(tc.ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitShort, func() error {
		cond := conditions.Get(tc.config(w), clusterv1.PausedCondition)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "annotation") {
			return fmt.Errorf("paused condition %+v", cond)
		}
		return nil
	})
}

// TestWriteOnce: the data never changes once written, whatever happens to its inputs.
func TestWriteOnce(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "wo")
	tc.provision()
	cp := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version)
	secret, doc := tc.waitForData(cp)

	// The spec is frozen.
	c := tc.config(cp)
	c.Spec.PreCommands = []string{"echo changed"}
	err := tc.c.Update(tc.ctx, c)
	if err == nil || !strings.Contains(err.Error(), "immutable once the bootstrap data exists") {
		t.Fatalf("spec change accepted after data exists: %v", err)
	}
	// Metadata may still change (Cluster API sets labels and owners).
	c = tc.config(cp)
	c.Labels["team"] = "a"
	if err := tc.c.Update(tc.ctx, c); err != nil {
		t.Fatalf("label change refused: %v", err)
	}

	// A new endpoint does not rewrite the data.
	tc.update(func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Host = "10.9.9.9" })
	framework.Consistently(t, 3*time.Second, func() error {
		s := &corev1.Secret{}
		if err := tc.c.Get(tc.ctx, client.ObjectKeyFromObject(secret), s); err != nil {
			return err
		}
		if !bytes.Equal(s.Data["value"], doc) {
			return fmt.Errorf("bootstrap data changed")
		}
		return nil
	})

	// A deleted Secret is reported, not silently rendered again with other credentials.
	if err := tc.c.Delete(tc.ctx, secret); err != nil {
		t.Fatal(err)
	}
	cond := tc.waitForCondition(cp, bootstrapv1.DataSecretCreationFailedReason, true)
	if !strings.Contains(cond.Message, "delete the Machine") {
		t.Errorf("the condition does not say how to recover: %q", cond.Message)
	}
	if conditions.IsTrue(tc.config(cp), bootstrapv1.ReadyCondition) {
		t.Error("Ready stays true although the data is gone")
	}
}

// TestMoveRestore: after clusterctl move (or a restore) the status is gone but the Machine and
// the Secret are there; the status is restored and nothing is rendered again.
func TestMoveRestore(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "mv")
	tc.provision()
	cp := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version)
	secret, doc := tc.waitForData(cp)

	// Recreate the KairosConfig as move does: same spec, new UID, no status; the Secret keeps
	// its data and gets its owner reference rewritten to the new object, and the Machine
	// already names the data secret.
	target := newNamespace(t)
	moved := newCluster(t, target, "mv")
	moved.provision()
	m := cp.m.DeepCopy()
	m.ObjectMeta = metav1.ObjectMeta{Name: m.Name, Namespace: target, Labels: m.Labels}
	m.Spec.Bootstrap.DataSecretName = ptr.To(secret.Name)
	if err := moved.c.Create(moved.ctx, m); err != nil {
		t.Fatal(err)
	}
	config := cp.config.DeepCopy()
	config.ObjectMeta = metav1.ObjectMeta{Name: config.Name, Namespace: target, Labels: config.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m.Name, UID: m.UID}}}
	config.Status = bootstrapv1.KairosConfigStatus{}
	if err := moved.c.Create(moved.ctx, config); err != nil {
		t.Fatal(err)
	}
	copied := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret.Name, Namespace: target, Labels: secret.Labels, Annotations: secret.Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))}},
		Type: secret.Type, Data: secret.Data,
	}
	if err := moved.c.Create(moved.ctx, copied); err != nil {
		t.Fatal(err)
	}
	mm := &machine{m: m, config: config}
	_, got := moved.waitForData(mm)
	if !bytes.Equal(got, doc) {
		t.Fatal("bootstrap data was regenerated after move")
	}
	// No new cluster CA was generated in the target (the moved Machine already had data).
	err := moved.c.Get(moved.ctx, client.ObjectKey{Namespace: target, Name: "mv-ca"}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("restoring status generated cluster certificates: %v", err)
	}

	// A restore from backup may bring the Secret back without owner: it is adopted.
	restored := newNamespace(t)
	rc := newCluster(t, restored, "mv")
	rc.provision()
	m2 := cp.m.DeepCopy()
	m2.ObjectMeta = metav1.ObjectMeta{Name: m2.Name, Namespace: restored, Labels: m2.Labels}
	if err := rc.c.Create(rc.ctx, m2); err != nil {
		t.Fatal(err)
	}
	orphan := copied.DeepCopy()
	orphan.ObjectMeta = metav1.ObjectMeta{Name: secret.Name, Namespace: restored, Labels: secret.Labels}
	if err := rc.c.Create(rc.ctx, orphan); err != nil {
		t.Fatal(err)
	}
	config2 := cp.config.DeepCopy()
	config2.ObjectMeta = metav1.ObjectMeta{Name: config2.Name, Namespace: restored, Labels: config2.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: m2.Name, UID: m2.UID}}}
	config2.Status = bootstrapv1.KairosConfigStatus{}
	if err := rc.c.Create(rc.ctx, config2); err != nil {
		t.Fatal(err)
	}
	_, got = rc.waitForData(&machine{m: m2, config: config2})
	if !bytes.Equal(got, doc) {
		t.Fatal("bootstrap data was regenerated after restore")
	}
}

// TestWatchFilter: objects without the manager's watch-filter value are left alone.
func TestWatchFilter(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "wf")
	tc.provision()
	tc.update(func(c *clusterv1.Cluster) { c.Labels[clusterv1.WatchLabel] = "other-manager" })
	cp := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK0s), version)
	framework.Consistently(t, 4*time.Second, func() error {
		c := tc.config(cp)
		if len(c.Status.Conditions) > 0 || c.Status.DataSecretName != "" {
			return fmt.Errorf("reconciled an object filtered out: %+v", c.Status)
		}
		return nil
	})
	c := tc.config(cp)
	c.Labels[clusterv1.WatchLabel] = watchFilter
	if err := tc.c.Update(tc.ctx, c); err != nil {
		t.Fatal(err)
	}
	tc.update(func(c *clusterv1.Cluster) { c.Labels[clusterv1.WatchLabel] = watchFilter })
	tc.waitForData(cp)
}

// TestMachinePoolWorker renders for a MachinePool owner.
func TestMachinePoolWorker(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "mp")
	tc.provision()
	tc.waitForData(tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version))
	tc.initialize()

	pool := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns, Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: "mp",
			Replicas:    ptr.To[int32](2),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "mp", Version: version,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: "pool"}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachinePool", Name: "pool"},
			}},
		},
	}
	if err := tc.c.Create(tc.ctx, pool); err != nil {
		t.Fatal(err)
	}
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: "mp", clusterv1.WatchLabel: watchFilter},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: "pool", UID: pool.UID}}},
		Spec: worker(bootstrapv1.DistributionK3s),
	}
	if err := tc.c.Create(tc.ctx, config); err != nil {
		t.Fatal(err)
	}
	tc.waitForData(&machine{config: config})
}

// TestMachinePoolJoinTokenRecovery: a MachinePool's data is write-once and handed to every
// node the pool adds, at any time. When its bootstrap token disappears from the workload
// cluster (it expired while the controller was away and the token cleaner removed it), the
// controller re-creates the very token the data holds and says so in JoinTokenAvailable.
func TestMachinePoolJoinTokenRecovery(t *testing.T) {
	ns := newNamespace(t)
	tc := newCluster(t, ns, "mpk")
	tc.provision()
	tc.initialize()
	tc.createCA()
	tc.connectWorkload()
	pool := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns, Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: "mpk",
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
				ClusterName: "mpk", Version: version,
				Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
					APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: "pool"}},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "TestMachinePool", Name: "pool"},
			}},
		},
	}
	if err := tc.c.Create(tc.ctx, pool); err != nil {
		t.Fatal(err)
	}
	config := &bootstrapv1.KairosConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns,
			Labels:          map[string]string{clusterv1.ClusterNameLabel: "mpk", clusterv1.WatchLabel: watchFilter},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachinePool", Name: "pool", UID: pool.UID}}},
		Spec: worker(bootstrapv1.DistributionK0s),
	}
	if err := tc.c.Create(tc.ctx, config); err != nil {
		t.Fatal(err)
	}
	m := &machine{config: config}
	_, doc := tc.waitForData(m)
	info, err := token.ParseK0sJoinToken(findJoinToken(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: "kube-system", Name: info.Token.SecretName()}
	ctx := framework.Context(t)
	s := &corev1.Secret{}
	if err := workload.Client.Get(ctx, key, s); err != nil {
		t.Fatalf("bootstrap token not created: %v", err)
	}
	if err := workload.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*tokenTTL, func() error {
		s := &corev1.Secret{}
		if err := workload.Client.Get(ctx, key, s); err != nil {
			return err
		}
		if string(s.Data["token-secret"]) != info.Token.Secret || string(s.Data["usage-bootstrap-authentication"]) != "true" {
			return fmt.Errorf("re-created token %s does not match the data's", key.Name)
		}
		return nil
	})
	framework.Eventually(t, waitShort, func() error {
		c := conditions.Get(tc.config(m), bootstrapv1.JoinTokenAvailableCondition)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("JoinTokenAvailable = %+v", c)
		}
		return nil
	})
}

// TestClusterNetworkReachesTheNode: the Cluster's clusterNetwork reaches a k3s server, which
// listens on apiServerPort while nodes join through the endpoint's port.
func TestClusterNetworkReachesTheNode(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "net")
	tc.update(func(c *clusterv1.Cluster) {
		c.Spec.ClusterNetwork = clusterv1.ClusterNetwork{
			APIServerPort: 6443,
			Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"10.244.0.0/16"}},
			Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.96.0.0/12"}},
			ServiceDomain: "cluster.example",
		}
		c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "10.0.0.10", Port: 443}
		c.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	})
	tc.waitForData(tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), version)) // creates the tokens
	tc.initialize()
	_, doc := tc.waitForData(tc.addMachine("cp-1", controlPlane(bootstrapv1.DistributionK3s), version))
	for _, want := range []string{"--https-listen-port=6443", "--server=https://10.0.0.10:443", "--cluster-cidr=10.244.0.0/16", "--service-cidr=10.96.0.0/12", "--cluster-domain=cluster.example"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("the server's data does not contain %s", want)
		}
	}
}

// TestVersionSources: the version comes from the spec or the Machine; disagreement is reported.
func TestVersionSources(t *testing.T) {
	tc := newCluster(t, newNamespace(t), "v")
	tc.provision()
	cp := tc.addMachine("cp-0", controlPlane(bootstrapv1.DistributionK3s), "")
	tc.waitForReason(cp, bootstrapv1.WaitingForKubernetesVersionReason)

	spec := controlPlane(bootstrapv1.DistributionK3s)
	spec.KubernetesVersion = "v1.30.1"
	other := tc.addMachine("cp-1", spec, version)
	cond := tc.waitForReason(other, bootstrapv1.InvalidConfigurationReason)
	if !strings.Contains(cond.Message, "v1.30.1") || !strings.Contains(cond.Message, version) {
		t.Errorf("version mismatch message does not name both versions: %q", cond.Message)
	}
}

// createCA stores a cluster CA as <cluster>-ca, as a control-plane provider does.
func (tc *testCluster) createCA() {
	tc.t.Helper()
	ca, err := pki.NewCA("kubernetes-ca", time.Hour)
	if err != nil {
		tc.t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tc.cluster.Name + "-ca", Namespace: tc.cluster.Namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: tc.cluster.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"tls.crt": ca.Cert, "tls.key": ca.Key},
	}
	if err := tc.c.Create(tc.ctx, s); err != nil {
		tc.t.Fatal(err)
	}
}
