package controlplane_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/util/secret"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// updateMachineHandler is the name the control-plane manager serves its UpdateMachine handler
// under (controlplane/internal/extension.UpdateMachineHandler).
const updateMachineHandler = "kairos-update-machine"

// TestInPlaceUpdateResumesOnceTheOperatorIsInstalled (issue 32): the UpdateMachine hook, served by
// the suite's manager and reaching a real workload API server through the manager's ClusterCache,
// is called as Cluster API's Machine controller calls it. Without the Kairos operator it must
// wait (Success with retryAfterSeconds, saying what to install), not fail: Cluster API turns a
// failure into a reconcile error retried with exponential backoff of up to 1000 s and shows only
// "please check controller logs". Once the operator's CRD is installed, the next calls create the
// NodeOpUpgrade, nothing restarted: the ClusterCache's REST mapper discovers the new API.
func TestInPlaceUpdateResumesOnceTheOperatorIsInstalled(t *testing.T) {
	ctx := framework.Context(t)
	const (
		clusterName = "resume"
		nodeName    = "resume-node"
		image       = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.6.0-k3sv1.37.0-k3s1"
	)

	// The workload cluster: an API server with Nodes and no NodeOpUpgrade API.
	wscheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(wscheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(wscheme); err != nil {
		t.Fatal(err)
	}
	workload, err := framework.Start(framework.Options{Scheme: wscheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = workload.Stop() })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{corev1.LabelHostname: nodeName}}}
	if err := workload.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.36.3+k3s1", BootID: "boot-1"}
	if err := workload.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}

	// The management side: a Cluster the manager's ClusterCache connects to (it carries the
	// watch-filter label; nothing refers to a KairosControlPlane or KairosConfig, so the
	// controllers have nothing to do), its kubeconfig, and a Machine on the Node.
	c := mgmt.Client
	ns := newNamespace(t)
	kubeconfig, err := workload.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret.Name(clusterName, secret.Kubeconfig),
			Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{secret.KubeconfigDataName: kubeconfig},
	}); err != nil {
		t.Fatal(err)
	}
	endpoint, err := url.Parse(workload.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.ParseInt(endpoint.Port(), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName, Labels: map[string]string{clusterv1.WatchLabel: watchFilter}},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: endpoint.Hostname(), Port: int32(port)}},
	}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := c.Status().Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resume-cp-abcde", Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Version:     "v1.37.0+k3s1",
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "bootstrap.cluster.x-k8s.io", Kind: "KairosConfig", Name: "resume-cp-abcde"}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "KairosSimMachine", Name: "resume-cp-abcde"},
		},
	}
	if err := c.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: nodeName}
	if err := c.Status().Update(ctx, machine); err != nil {
		t.Fatal(err)
	}

	call := func() *runtimehooksv1.UpdateMachineResponse {
		t.Helper()
		resp, err := callUpdateMachine(ctx, machine, image)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	// Until the manager's cache has the Machine and its ClusterCache is connected, the hook
	// waits for those; then it reaches the workload cluster and finds no NodeOpUpgrade API.
	var resp *runtimehooksv1.UpdateMachineResponse
	framework.Eventually(t, 20*time.Second, func() error {
		resp = call()
		if !strings.Contains(resp.GetMessage(), "NodeOpUpgrade API") {
			return fmt.Errorf("the hook has not reached the workload cluster yet: %s %q", resp.GetStatus(), resp.GetMessage())
		}
		return nil
	})
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || resp.GetRetryAfterSeconds() <= 0 {
		t.Errorf("without the operator the hook answers %s, retry after %d s: want a retry (Success with retryAfterSeconds), not a failure Cluster API backs off from: %q",
			resp.GetStatus(), resp.GetRetryAfterSeconds(), resp.GetMessage())
	}
	for _, want := range []string{"Kairos operator", "kubectl apply -k https://github.com/kairos-io/kairos-operator/config/default"} {
		if !strings.Contains(resp.GetMessage(), want) {
			t.Errorf("message %q lacks %q", resp.GetMessage(), want)
		}
	}
	if n := len(nodeOpUpgrades(ctx, t, workload.Client)); n != 0 {
		t.Fatalf("%d NodeOpUpgrades before the operator was installed", n)
	}

	// The user installs the operator (what the extension needs of it is its CRD).
	installNodeOpUpgradeCRD(ctx, t, workload.Client)

	// The next calls, through the same ClusterCache connection, create the NodeOpUpgrade.
	framework.Eventually(t, 10*time.Second, func() error {
		resp = call()
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess || !strings.Contains(resp.GetMessage(), "created") {
			return fmt.Errorf("after installing the operator the hook answers %s: %q", resp.GetStatus(), resp.GetMessage())
		}
		return nil
	})
	if resp.GetRetryAfterSeconds() <= 0 {
		t.Errorf("the upgrade started but the hook asks no retry: %q", resp.GetMessage())
	}
	items := nodeOpUpgrades(ctx, t, workload.Client)
	if len(items) != 1 {
		t.Fatalf("%d NodeOpUpgrades, want 1", len(items))
	}
	gotImage, _, _ := unstructured.NestedString(items[0].Object, "spec", "image")
	gotNode, _, _ := unstructured.NestedString(items[0].Object, "spec", "nodeSelector", "matchLabels", corev1.LabelHostname)
	if gotImage != image || gotNode != nodeName {
		t.Errorf("NodeOpUpgrade %s upgrades node %q to %q, want %q to %q", items[0].GetName(), gotNode, gotImage, nodeName, image)
	}
}

// callUpdateMachine sends an UpdateMachine request for machine with a KairosConfig asking for
// image to the manager's webhook server, over TLS, as Cluster API's runtime client does.
func callUpdateMachine(ctx context.Context, machine *clusterv1.Machine, image string) (*runtimehooksv1.UpdateMachineResponse, error) {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return nil, err
	}
	gvh, err := catalog.GroupVersionHook(runtimehooksv1.UpdateMachine)
	if err != nil {
		return nil, err
	}
	raw := func(obj map[string]any) (runtime.RawExtension, error) {
		data, err := json.Marshal(obj)
		return runtime.RawExtension{Raw: data}, err
	}
	desired := machine.DeepCopy()
	desired.Status = clusterv1.MachineStatus{} // Cluster API sends the desired spec only
	desired.TypeMeta = metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"}
	boot, err := raw(map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KairosConfig",
		"metadata": map[string]any{"name": machine.Name, "namespace": machine.Namespace},
		"spec":     map[string]any{"distribution": "k3s", "role": "control-plane", "image": image}})
	if err != nil {
		return nil, err
	}
	infra, err := raw(map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "KairosSimMachine",
		"metadata": map[string]any{"name": machine.Name, "namespace": machine.Namespace}, "spec": map[string]any{}})
	if err != nil {
		return nil, err
	}
	req := &runtimehooksv1.UpdateMachineRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: runtimehooksv1.GroupVersion.String(), Kind: "UpdateMachineRequest"},
		Desired:  runtimehooksv1.UpdateMachineRequestObjects{Machine: *desired, BootstrapConfig: boot, InfrastructureMachine: infra},
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	wh := mgmt.WebhookInstallOptions
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(wh.LocalServingCAData) {
		return nil, errors.New("the webhook server's CA is not PEM")
	}
	hc := &http.Client{Timeout: 25 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	addr := "https://" + net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort)) + runtimecatalog.GVHToPath(gvh, updateMachineHandler)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, addr, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("calling UpdateMachine: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the UpdateMachine response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("UpdateMachine answered HTTP %d: %s", res.StatusCode, data)
	}
	resp := &runtimehooksv1.UpdateMachineResponse{}
	if err := json.Unmarshal(data, resp); err != nil {
		return nil, fmt.Errorf("decoding the UpdateMachine response: %w", err)
	}
	return resp, nil
}

// installNodeOpUpgradeCRD installs the Kairos operator's NodeOpUpgrade CRD, as
// simnode.Cluster.InstallKairosOperator does, and waits until it is established.
func installNodeOpUpgradeCRD(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	crd := simnode.NodeOpUpgradeCRD()
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, func() error {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return errors.New("the NodeOpUpgrade CRD is not established")
	})
}

// nodeOpUpgrades lists the NodeOpUpgrades of the workload cluster (none while it has no such API).
func nodeOpUpgrades(ctx context.Context, t *testing.T, c client.Client) []unstructured.Unstructured {
	t.Helper()
	probe := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: simnode.NodeOpUpgradeCRD().Name}, probe); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(simnode.NodeOpUpgradeGVK.GroupVersion().WithKind(simnode.NodeOpUpgradeGVK.Kind + "List"))
	if err := c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}
