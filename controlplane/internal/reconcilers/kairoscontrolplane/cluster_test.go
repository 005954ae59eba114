package kairoscontrolplane

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
)

var kubeconfigKey = client.ObjectKey{Namespace: testNS, Name: clusterName + "-kubeconfig"}

func (e *env) getKubeconfig() *corev1.Secret {
	e.t.Helper()
	s := &corev1.Secret{}
	if err := e.c.Get(context.Background(), kubeconfigKey, s); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		e.t.Fatal(err)
	}
	return s
}

// clientCert parses the client certificate of a kubeconfig Secret.
func clientCert(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	cfg, err := clientcmd.Load(s.Data[secret.KubeconfigDataName])
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		c, err := pki.ParseCertificate(a.ClientCertificateData)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Fatal("kubeconfig has no user")
	return nil
}

func TestReconcileKubeconfigCreates(t *testing.T) {
	for _, tc := range []struct {
		name     string
		validity *int32
		want     time.Duration
	}{
		{name: "default validity: one year", want: 365 * 24 * time.Hour},
		{name: "custom validity", validity: ptr.To[int32](7200), want: 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			f.objs = append(f.objs, clusterPKI(t)...)
			f.kcp.Spec.Kubeconfig.ClientCertificateValiditySeconds = tc.validity
			f.kcp.Spec.Kubeconfig.ObjectMeta = clusterv1.ObjectMeta{
				Labels:      map[string]string{"team": "a"},
				Annotations: map[string]string{"example.com/rotated-by": "kairos"},
			}
			e := f.build()
			before := time.Now()
			res, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
			if err != nil || res.RequeueAfter <= 0 {
				t.Fatalf("reconcileKubeconfig = %+v, %v; want a requeue for the rotation", res, err)
			}
			s := e.getKubeconfig()
			if s == nil {
				t.Fatal("no kubeconfig Secret")
			}
			if s.Type != clusterv1.ClusterSecretType {
				t.Errorf("type = %s, want %s", s.Type, clusterv1.ClusterSecretType)
			}
			if s.Labels[clusterv1.ClusterNameLabel] != clusterName || s.Labels["team"] != "a" || s.Annotations["example.com/rotated-by"] != "kairos" {
				t.Errorf("metadata = %v / %v", s.Labels, s.Annotations)
			}
			if len(s.OwnerReferences) != 1 || !metav1.IsControlledBy(s, f.kcp) {
				t.Errorf("owner references = %+v, want the KairosControlPlane as controller", s.OwnerReferences)
			}
			cfg, err := clientcmd.Load(s.Data[secret.KubeconfigDataName])
			if err != nil {
				t.Fatal(err)
			}
			cluster := cfg.Clusters[clusterName]
			if cluster == nil || cluster.Server != "https://api.demo.example.com:6443" {
				t.Errorf("kubeconfig clusters = %+v", cfg.Clusters)
			}
			ca, err := clustersecret.LookupPKI(ctx, e.c, client.ObjectKey{Namespace: testNS, Name: clusterName})
			if err != nil {
				t.Fatal(err)
			}
			if cluster != nil && !bytes.Equal(cluster.CertificateAuthorityData, ca.ClusterCA.Cert) {
				t.Error("kubeconfig does not trust the cluster CA")
			}
			cert := clientCert(t, s)
			if cert.Subject.CommonName != kubeconfigUser || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:masters" {
				t.Errorf("client certificate subject = %v", cert.Subject)
			}
			if got := cert.NotAfter.Sub(before); got < tc.want-time.Minute || got > tc.want+time.Minute {
				t.Errorf("client certificate valid for %s, want %s", got, tc.want)
			}
			caCert, _ := pki.ParseCertificate(ca.ClusterCA.Cert)
			if err := cert.CheckSignatureFrom(caCert); err != nil {
				t.Errorf("client certificate not signed by the cluster CA: %v", err)
			}
		})
	}
}

func TestReconcileKubeconfigRotation(t *testing.T) {
	ctx := testContext(t)
	const validity = 3 * time.Hour
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.kcp.Spec.Kubeconfig.ClientCertificateValiditySeconds = ptr.To(int32(validity / time.Second))
	e := f.build()
	if _, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	first := e.getKubeconfig()
	notAfter := clientCert(t, first).NotAfter
	rotateAt := notAfter.Add(-validity / 2)

	for _, tc := range []struct {
		name   string
		at     time.Time
		rotate bool
	}{
		{name: "right after issuing", at: time.Now()},
		{name: "a third of the way", at: notAfter.Add(-validity * 2 / 3)},
		{name: "just before half is left", at: rotateAt.Add(-time.Minute)},
		{name: "half left", at: rotateAt.Add(time.Second), rotate: true},
		{name: "expired", at: notAfter.Add(time.Hour), rotate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := f.build()
			kc := first.DeepCopy()
			kc.ResourceVersion = ""
			if err := e.c.Create(ctx, kc); err != nil {
				t.Fatal(err)
			}
			s := e.scope(ctx)
			s.reconcileTime = tc.at
			res, err := e.r.reconcileKubeconfig(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			got := e.getKubeconfig()
			rotated := !bytes.Equal(got.Data[secret.KubeconfigDataName], first.Data[secret.KubeconfigDataName])
			if rotated != tc.rotate {
				t.Fatalf("rotated = %v, want %v", rotated, tc.rotate)
			}
			if tc.rotate {
				if res.RequeueAfter <= 0 {
					t.Errorf("result after rotation = %+v, want a requeue for the next rotation", res)
				}
				// The new certificate is signed at the real time, not the simulated one.
				if c := clientCert(t, got); c.SerialNumber.Cmp(clientCert(t, first).SerialNumber) == 0 || c.NotAfter.Before(notAfter.Add(-time.Second)) {
					t.Errorf("rotated certificate: serial %v, notAfter %s (old %s)", c.SerialNumber, c.NotAfter, notAfter)
				}
				return
			}
			if want := rotateAt.Sub(tc.at); res.RequeueAfter != want {
				t.Errorf("RequeueAfter = %s, want %s (until the rotation)", res.RequeueAfter, want)
			}
		})
	}
}

// TestReconcileKubeconfigRequeuesTheNextRotation: after creating the kubeconfig and after
// rotating its client certificate, reconcileKubeconfig asks to be called again before the
// next rotation is due (within the certificate's validity). The manager's sync period (10 h)
// is longer than a short clientCertificateValiditySeconds, and no other event has to come.
func TestReconcileKubeconfigRequeuesTheNextRotation(t *testing.T) {
	ctx := testContext(t)
	const validity = time.Hour
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	f.kcp.Spec.Kubeconfig.ClientCertificateValiditySeconds = ptr.To(int32(validity / time.Second))
	e := f.build()

	res, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > validity {
		t.Errorf("after creating the kubeconfig: RequeueAfter = %s, want about %s (the next rotation)", res.RequeueAfter, validity/2)
	}

	s := e.scope(ctx)
	s.reconcileTime = time.Now().Add(validity) // rotation due
	res, err = e.r.reconcileKubeconfig(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > validity {
		t.Errorf("after rotating the kubeconfig: RequeueAfter = %s, want about %s (the next rotation)", res.RequeueAfter, validity/2)
	}
}

func TestReconcileKubeconfigUpdates(t *testing.T) {
	cases := []struct {
		name   string
		change func(s *corev1.Secret, kcp *controlplanev1.KairosControlPlane)
		// rotate says whether the certificate is reissued.
		rotate bool
		check  func(t *testing.T, s *corev1.Secret)
	}{
		{name: "current: untouched", change: func(*corev1.Secret, *controlplanev1.KairosControlPlane) {}},
		{name: "new label in the spec",
			change: func(_ *corev1.Secret, kcp *controlplanev1.KairosControlPlane) {
				kcp.Spec.Kubeconfig.ObjectMeta.Labels = map[string]string{"team": "b"}
			},
			rotate: true,
			check: func(t *testing.T, s *corev1.Secret) {
				if s.Labels["team"] != "b" || s.Labels[clusterv1.ClusterNameLabel] != clusterName || s.Labels["extra"] != "kept" {
					t.Errorf("labels = %v", s.Labels)
				}
			}},
		{name: "new annotation in the spec",
			change: func(_ *corev1.Secret, kcp *controlplanev1.KairosControlPlane) {
				kcp.Spec.Kubeconfig.ObjectMeta.Annotations = map[string]string{"note": "x"}
			},
			rotate: true,
			check: func(t *testing.T, s *corev1.Secret) {
				if s.Annotations["note"] != "x" {
					t.Errorf("annotations = %v", s.Annotations)
				}
			}},
		{name: "not controlled by the control plane: taken over",
			change: func(s *corev1.Secret, _ *controlplanev1.KairosControlPlane) {
				s.OwnerReferences = []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: clusterName, UID: "cluster-uid"}}
			},
			rotate: true,
			check: func(t *testing.T, s *corev1.Secret) {
				if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "KairosControlPlane" || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
					t.Errorf("owner references = %+v", s.OwnerReferences)
				}
			}},
		{name: "unreadable kubeconfig: replaced",
			change: func(s *corev1.Secret, _ *controlplanev1.KairosControlPlane) {
				s.Data[secret.KubeconfigDataName] = []byte("not a kubeconfig")
			},
			rotate: true},
		{name: "kubeconfig without a client certificate: replaced",
			change: func(s *corev1.Secret, _ *controlplanev1.KairosControlPlane) {
				s.Data[secret.KubeconfigDataName] = []byte("apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: abc\n")
			},
			rotate: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			f := newFixture(t)
			f.objs = append(f.objs, clusterPKI(t)...)
			e := f.build()
			if _, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx)); err != nil {
				t.Fatal(err)
			}
			s := e.getKubeconfig()
			s.Labels["extra"] = "kept"
			tc.change(s, f.kcp)
			if err := e.c.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
			stored := e.getKubeconfig()
			res, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
			if err != nil {
				t.Fatal(err)
			}
			got := e.getKubeconfig()
			rotated := !bytes.Equal(got.Data[secret.KubeconfigDataName], stored.Data[secret.KubeconfigDataName])
			if rotated != tc.rotate {
				t.Errorf("rewritten = %v, want %v", rotated, tc.rotate)
			}
			if !tc.rotate && (res.RequeueAfter <= 0 || got.ResourceVersion != stored.ResourceVersion) {
				t.Errorf("current Secret: result %+v, resourceVersion %s -> %s", res, stored.ResourceVersion, got.ResourceVersion)
			}
			if tc.rotate {
				clientCert(t, got) // parses
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// TestReconcileKubeconfigCacheMiss: a Secret the cache does not have yet but the API server
// does is not created again.
func TestReconcileKubeconfigCacheMiss(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.objs = append(f.objs, clusterPKI(t)...)
	live := f.build()
	if _, err := live.r.reconcileKubeconfig(ctx, live.scope(ctx)); err != nil {
		t.Fatal(err)
	}
	cached := f.build() // the same objects, without the kubeconfig Secret
	cached.r.APIReader = live.c
	created := false
	cached.r.Client = interceptor.NewClient(cached.c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			created = true
			return c.Create(ctx, obj, opts...)
		},
	})
	res, err := cached.r.reconcileKubeconfig(ctx, cached.scope(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if created || res.RequeueAfter <= 0 {
		t.Errorf("created = %v, result %+v; want the live Secret used", created, res)
	}
}

func TestReconcileKubeconfigErrors(t *testing.T) {
	ctx := testContext(t)
	t.Run("no cluster CA", func(t *testing.T) {
		f := newFixture(t)
		f.noPKI = true
		e := f.build()
		_, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
		if err == nil || !strings.Contains(err.Error(), "reading the cluster CA") {
			t.Errorf("error = %v", err)
		}
		if e.getKubeconfig() != nil {
			t.Error("kubeconfig created without a CA")
		}
	})
	t.Run("reading the Secret fails", func(t *testing.T) {
		f := newFixture(t)
		f.interceptor = &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key == kubeconfigKey {
				return errors.New("etcd timeout")
			}
			return c.Get(ctx, key, obj, opts...)
		}}
		e := f.build()
		_, err := e.r.reconcileKubeconfig(ctx, e.scope(ctx))
		if err == nil || !strings.Contains(err.Error(), "reading the kubeconfig Secret: etcd timeout") {
			t.Errorf("error = %v", err)
		}
	})
}

func TestKubeconfigNotAfter(t *testing.T) {
	if _, err := kubeconfigNotAfter([]byte("{")); err == nil {
		t.Error("garbage parsed")
	}
	if _, err := kubeconfigNotAfter([]byte("apiVersion: v1\nkind: Config\n")); err == nil {
		t.Error("kubeconfig without users parsed")
	}
}

func TestReconcileCertificates(t *testing.T) {
	ctx := testContext(t)
	for _, k3s := range []bool{false, true} {
		f := newFixture(t)
		want := []string{"demo-ca", "demo-etcd", "demo-proxy", "demo-sa"}
		if k3s {
			f.k3s()
			f.objs = append(f.objs, clusterPKI(t)...)
			want = []string{"demo-ca", "demo-etcd", "demo-k3s-token", "demo-proxy", "demo-sa"}
		}
		e := f.build()
		s := e.scope(ctx)
		if _, err := e.r.reconcileCertificates(ctx, s); err != nil || s.certificatesErr != nil {
			t.Fatalf("k3s=%v: %v / %v", k3s, err, s.certificatesErr)
		}
		list := &corev1.SecretList{}
		if err := e.c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sec := range list.Items {
			names = append(names, sec.Name)
			if !metav1.IsControlledBy(&sec, f.kcp) {
				t.Errorf("Secret %s is not controlled by the control plane: %+v", sec.Name, sec.OwnerReferences)
			}
		}
		slices.Sort(names)
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("k3s=%v: Secrets = %v, want %v", k3s, names, want)
		}
	}
}

func TestReconcileCertificatesError(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.interceptor = &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			return errors.New("forbidden")
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	e := f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileCertificates(ctx, s); err == nil || s.certificatesErr == nil {
		t.Errorf("error = %v, certificatesErr = %v", err, s.certificatesErr)
	}
	updateStatus(ctx, s)
	assertCondition(t, f.kcp, controlplanev1.CertificatesAvailableCondition, metav1.ConditionFalse, controlplanev1.CertificatesInternalErrorReason, "see the controller logs")
}

func TestReconcilePrerequisites(t *testing.T) {
	ctx := testContext(t)
	cases := []struct {
		name   string
		vip    string
		change func(c *clusterv1.Cluster)
		want   string
	}{
		{name: "ready", change: func(*clusterv1.Cluster) {}},
		{name: "infrastructure not provisioned",
			change: func(c *clusterv1.Cluster) { c.Status.Initialization.InfrastructureProvisioned = nil },
			want:   "waiting for Cluster demo infrastructure to be provisioned"},
		{name: "no endpoint",
			change: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{} },
			want:   "waiting for Cluster demo spec.controlPlaneEndpoint"},
		{name: "virtual IP is the endpoint", vip: "192.0.2.10",
			change: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Host = "192.0.2.10" }},
		{name: "virtual IP is not the endpoint", vip: "192.0.2.99",
			change: func(c *clusterv1.Cluster) { c.Spec.ControlPlaneEndpoint.Host = "192.0.2.10" },
			want:   "the virtual IP 192.0.2.99 (spec.kairosConfigSpec.virtualIP.address) is not Cluster demo spec.controlPlaneEndpoint.host 192.0.2.10: set the endpoint host (on the Cluster or its infrastructure cluster) to the virtual IP"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.change(f.cluster)
			s := &scope{kcp: f.kcp, cluster: f.cluster, baseConfig: f.kcp.Spec.KairosConfigSpec.DeepCopy()}
			if tc.vip != "" {
				s.baseConfig.VirtualIP = &bootstrapv1.VirtualIP{Address: tc.vip}
			}
			if _, err := (&Reconciler{}).reconcilePrerequisites(ctx, s); err != nil {
				t.Fatal(err)
			}
			if s.halted != (tc.want != "") || s.waitMessage != tc.want {
				t.Errorf("halted = %v %q, want %q", s.halted, s.waitMessage, tc.want)
			}
		})
	}
}

func TestReconcileInitialized(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name      string
		apiServed bool
		opts      []func(*clusterv1.Machine)
		want      bool
	}{
		{name: "no node yet, API not served", opts: []func(*clusterv1.Machine){withoutNode()}},
		{name: "node registered", want: true},
		// Cluster API's Machine controller watches Nodes only once the Cluster is initialized:
		// the API answering is enough, or the first Machine may never get its nodeRef.
		{name: "no node yet, API served", apiServed: true, opts: []func(*clusterv1.Machine){withoutNode()}, want: true},
		{name: "API served, the only Machine deleting", apiServed: true, opts: []func(*clusterv1.Machine){withoutNode(), deleting(time.Second, "")}},
		{name: "API served, the only Machine to be remediated", apiServed: true, opts: []func(*clusterv1.Machine){withoutNode(), unhealthy()}},
	} {
		f := newFixture(t).notInitialized()
		f.machine("m1", time.Minute, tc.opts...)
		e := f.build()
		s := e.scope(ctx)
		s.apiServed = tc.apiServed
		if _, err := e.r.reconcileInitialized(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got := s.initialized(); got != tc.want {
			t.Errorf("%s: initialized = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Once initialized, it stays so even when no Machine has a node.
	f := newFixture(t)
	s := f.build().scope(ctx)
	if _, err := (&Reconciler{}).reconcileInitialized(ctx, s); err != nil || !s.initialized() {
		t.Errorf("initialized control plane became uninitialized")
	}
}

func TestMergeMaps(t *testing.T) {
	if got := mergeMaps(nil, map[string]string{}); got != nil {
		t.Errorf("merge of nothing = %v, want nil", got)
	}
	got := mergeMaps(map[string]string{"a": "1", "b": "1"}, map[string]string{"b": "2"})
	if len(got) != 2 || got["a"] != "1" || got["b"] != "2" {
		t.Errorf("merge = %v, want later maps to win", got)
	}
}

func TestReconcileTemplateOwnership(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	f.kcp.Spec.KairosConfigTemplate = &controlplanev1.KairosConfigTemplateReference{Name: "cp-config"}
	f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{}
	f.objs = append(f.objs, &bootstrapv1.KairosConfigTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cp-config"}})
	patches := 0
	f.interceptor = &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		patches++
		return c.Patch(ctx, obj, p, opts...)
	}}
	e := f.build()
	for pass := 0; pass < 2; pass++ {
		if _, err := e.r.reconcileTemplateOwnership(ctx, e.scope(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	if patches != 2 {
		t.Errorf("%d patches, want 2 (one per template, none once they are owned)", patches)
	}
	owned := func(o metav1.Object) bool {
		for _, r := range o.GetOwnerReferences() {
			if r.Kind == "Cluster" && r.Name == clusterName && r.UID == f.cluster.UID {
				return true
			}
		}
		return false
	}
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(infraGV.String())
	infra.SetKind(templateKind)
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: templateName}, infra); err != nil || !owned(infra) {
		t.Errorf("infrastructure template owners = %v (%v), want the Cluster", infra.GetOwnerReferences(), err)
	}
	tmpl := &bootstrapv1.KairosConfigTemplate{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "cp-config"}, tmpl); err != nil || !owned(tmpl) {
		t.Errorf("KairosConfigTemplate owners = %v (%v), want the Cluster", tmpl.OwnerReferences, err)
	}

	f = newFixture(t)
	f.kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "missing"
	e = f.build()
	s := e.scope(ctx)
	if _, err := e.r.reconcileTemplateOwnership(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.infraTemplateErr != "TestMachineTemplate missing does not exist" {
		t.Errorf("infraTemplateErr = %q", s.infraTemplateErr)
	}
}

// TestReconcileSecretOwnership: the Secrets the KairosConfigSpec references are owned by the
// Cluster when they are labelled as its own (the flavors' login Secret), so that deleting the
// Cluster deletes them; a Secret without the label, or labelled for another cluster, is left to
// its user.
func TestReconcileSecretOwnership(t *testing.T) {
	ctx := testContext(t)
	f := newFixture(t)
	secret := func(name, cluster string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}, Data: map[string][]byte{"value": []byte("x")}}
		if cluster != "" {
			s.Labels = map[string]string{clusterv1.ClusterNameLabel: cluster}
		}
		return s
	}
	f.objs = append(f.objs, secret("login", clusterName), secret("shared", ""), secret("other", "another-cluster"), secret("unreferenced", clusterName))
	f.kcp.Spec.KairosConfigSpec = bootstrapv1.KairosConfigSpec{
		UserPasswordSecretRef: &bootstrapv1.SecretKeyReference{Name: "login"},
		Files: []bootstrapv1.File{
			{Path: "/etc/a", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "shared"}},
			{Path: "/etc/b", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "other"}},
			{Path: "/etc/c", ContentFrom: &bootstrapv1.SecretKeyReference{Name: "missing"}},
		},
	}
	e := f.build()
	for pass := 0; pass < 2; pass++ {
		if _, err := e.r.reconcileTemplateOwnership(ctx, e.scope(ctx)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]bool{"login": true, "shared": false, "other": false, "unreferenced": false} {
		s := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		owned := false
		for _, r := range s.OwnerReferences {
			owned = owned || (r.Kind == "Cluster" && r.Name == clusterName && r.UID == f.cluster.UID && r.Controller == nil)
		}
		if owned != want || len(s.OwnerReferences) > 1 {
			t.Errorf("Secret %s owners %v, want owned by the Cluster %v (and by nothing else)", name, s.OwnerReferences, want)
		}
	}
}
