// Command run-bootstrap runs the Kairos bootstrap provider against an embedded local API server
// (kube-apiserver and etcd from the envtest assets) with Cluster API's and our CRDs and webhooks
// installed, and prints a kubeconfig to talk to it. It creates a Cluster "demo" whose
// infrastructure is provisioned, so that a Machine with a KairosConfig gets bootstrap data:
//
//	kubectl --kubeconfig <printed path> apply -f bootstrap/examples/demo.yaml
//
// Ctrl-C stops the provider and the API server.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/core/reconcilers/machine"

	"github.com/kairos-capi/kairos-capi/bootstrap/manager"
	"github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "run-bootstrap:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctrl.SetLogger(framework.Logger())

	scheme := runtime.NewScheme()
	if err := setup.AddToScheme(scheme); err != nil {
		return err
	}
	capi, err := framework.CAPICRDFiles()
	if err != nil {
		return err
	}
	ours, err := framework.ProjectCRDFiles("bootstrap")
	if err != nil {
		return err
	}
	crds, err := framework.LoadCRDs(append(capi, ours...)...)
	if err != nil {
		return err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "Starting a local API server (the first run builds it from source, about 10 minutes)...")
	env, err := framework.Start(framework.Options{
		CRDs: crds, Scheme: scheme,
		WebhookDirs: []string{filepath.Join(root, "bootstrap", "config", "webhook")},
	})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()

	wh := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  manager.CacheOptions("", 10*time.Minute),
		WebhookServer:          webhook.NewServer(webhook.Options{Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir}),
	})
	if err != nil {
		return err
	}
	opts := setup.Options{TokenTTL: setup.DefaultTokenTTL, KairosConfigConcurrency: 2}
	if opts.ClusterCache, err = manager.NewClusterCache(ctx, mgr, "run-bootstrap", manager.ClusterCacheOptions{Concurrency: 2}); err != nil {
		return err
	}
	if err := setup.Setup(ctx, mgr, opts); err != nil {
		return err
	}
	// Cluster API's own Machine controller links KairosConfigs to their Machines and copies the
	// data Secret name back, as in a real management cluster.
	if err := (&machine.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: opts.ClusterCache,
		RemoteConditionsGracePeriod: 5 * time.Minute,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 2}); err != nil {
		return err
	}
	errs := make(chan error, 1)
	go func() { errs <- mgr.Start(ctx) }()
	if err := env.WaitForWebhooks(30 * time.Second); err != nil {
		return err
	}

	demo := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: metav1.NamespaceDefault},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(false)}}
	if err := env.Client.Create(ctx, demo); err != nil {
		return err
	}
	demo.Spec.ControlPlaneEndpoint = clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443}
	if err := env.Client.Update(ctx, demo); err != nil {
		return err
	}
	demo.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if err := env.Client.Status().Update(ctx, demo); err != nil {
		return err
	}

	kubeconfig, err := env.AdminKubeconfig()
	if err != nil {
		return err
	}
	path := filepath.Join(os.TempDir(), "kairos-capi-run-bootstrap.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return err
	}
	fmt.Printf("The bootstrap provider is running. Cluster \"demo\" is provisioned in namespace default.\n")
	fmt.Printf("  export KUBECONFIG=%s\n", path)
	fmt.Printf("  kubectl apply -f %s\n", filepath.Join(root, "bootstrap", "examples", "demo.yaml"))
	fmt.Printf("  kubectl get kairosconfigs,machines\n")
	fmt.Printf("  kubectl get secret cp-0 -o jsonpath='{.data.value}' | base64 -d\n")
	fmt.Printf("Press Ctrl-C to stop.\n")

	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}
