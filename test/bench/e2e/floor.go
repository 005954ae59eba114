package e2e

import (
	"context"
	"flag"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// FloorCommand is the first argument that makes the bench-e2e command run the write floor
// instead of the benchmark; the benchmark starts it as a child process like the managers.
const FloorCommand = "floor"

// floorData stands in for a rendered document: the floor measures writes, not rendering.
var floorData = []byte("#cloud-config\n# written by the bench-e2e write floor\n")

// FloorMain runs the write floor with command-line arguments (after FloorCommand).
func FloorMain(args []string) error {
	fs := flag.NewFlagSet(FloorCommand, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the management API server")
	workloadKubeconfig := fs.String("workload-kubeconfig", "", "kubeconfig of the workload cluster")
	namespace := fs.String("namespace", "", "namespace of the KairosConfigs")
	qps := fs.Float64("kube-api-qps", 20, "client queries per second")
	burst := fs.Int("kube-api-burst", 30, "client burst")
	workloadQPS := fs.Float64("workload-qps", 20, "workload client queries per second")
	workloadBurst := fs.Int("workload-burst", 30, "workload client burst")
	concurrency := fs.Int("concurrency", 10, "configs handled at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", *kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	wcfg, err := clientcmd.BuildConfigFromFlags("", *workloadKubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", *workloadKubeconfig, err)
	}
	wcfg.QPS, wcfg.Burst = float32(*workloadQPS), *workloadBurst
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := bootstrapv1.AddToScheme(scheme); err != nil {
		return err
	}
	// controller-runtime's client, as a manager would use it: one rate limiter per resource
	// type, so Secret creates and status patches are limited separately, as in the Kairos
	// manager.
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating the client: %w", err)
	}
	wc, err := client.New(wcfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating the workload client: %w", err)
	}
	return runFloor(ctx, c, wc, *namespace, *concurrency)
}

// runFloor does, for every KairosConfig of the namespace, only what a joining worker requires:
// in the workload cluster, register the join token its data will hold (a bootstrap token
// Secret, as the Kairos manager writes it for k0s); in the management cluster, what the
// bootstrap contract requires, create the data Secret (owned by the config) and publish it in
// one status patch. It lists the configs once and reconciles nothing.
func runFloor(ctx context.Context, c, workload client.Client, namespace string, concurrency int) error {
	configs := &bootstrapv1.KairosConfigList{}
	if err := c.List(ctx, configs, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing KairosConfigs: %w", err)
	}
	return parallel(ctx, len(configs.Items), max(concurrency, 1), func(i int) error {
		config := &configs.Items[i]
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       config.Namespace,
				Name:            config.Name,
				Labels:          map[string]string{clusterv1.ClusterNameLabel: config.Labels[clusterv1.ClusterNameLabel]},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(config, bootstrapv1.GroupVersion.WithKind("KairosConfig"))},
			},
			Type: clusterv1.ClusterSecretType,
			Data: map[string][]byte{"value": floorData},
		}
		if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the data Secret of %s: %w", config.Name, err)
		}
		t, err := token.NewBootstrapToken()
		if err != nil {
			return err
		}
		data, err := token.K0sBootstrapTokenSecretData(token.K0sWorkerToken, t, time.Now().Add(15*time.Minute))
		if err != nil {
			return err
		}
		if err := workload.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: t.SecretName()},
			Type:       corev1.SecretTypeBootstrapToken,
			StringData: data,
		}); err != nil {
			return fmt.Errorf("creating the join token of %s: %w", config.Name, err)
		}
		patch := client.MergeFrom(config.DeepCopy())
		config.Status.DataSecretName = s.Name
		config.Status.Initialization.DataSecretCreated = ptr.To(true)
		if err := c.Status().Patch(ctx, config, patch); err != nil {
			return fmt.Errorf("patching the status of %s: %w", config.Name, err)
		}
		return nil
	})
}
