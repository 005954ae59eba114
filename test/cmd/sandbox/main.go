// Command sandbox runs a whole Kairos Cluster API setup on one machine with only Go: a local
// management API server, `clusterctl init` of Cluster API and both Kairos providers from
// repositories built by the release module, the providers, Cluster API's core controllers and
// a simulated infrastructure whose machines are simulated Kairos nodes (each cluster gets a
// real workload API server). It creates a cluster from the control-plane provider's
// cluster-template.yaml (k0s, 1 control plane, 2 workers), shows the cluster tree until it is
// ready, and keeps running with the management kubeconfig printed. Ctrl-C stops everything.
//
//	make sandbox                                      # flags: SANDBOX_ARGS="-cluster NAME -workers N"
//	make sandbox IN_PLACE=1                           # the same with -in-place
//	make sandbox-restore                              # one node, etcd snapshots, a restore (-restore)
//
// With -in-place, Cluster API runs with its RuntimeSDK and InPlaceUpdates feature gates, and the
// Kairos in-place update extension (served by the control-plane provider) is registered through
// an ExtensionConfig for the namespaces labelled test.kairos-capi.io/in-place-updates=true; the
// sandbox labels the namespace of its cluster (default), and once the cluster is ready it
// upgrades the control plane in place to inPlaceVersion (Kairos operator installed in the
// workload cluster, version and image changed with maxSurge 0). `make sandbox-in-place` runs
// that on a single-node cluster without workers: the edge case in-place upgrades exist for.
// Without it, nothing changes: no feature gate, no ExtensionConfig, classic rollouts.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/tree"
	clusterctllog "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/external"
	"sigs.k8s.io/cluster-api/util/conditions"

	kairosrender "github.com/kairos-capi/kairos-capi/common/render"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	cpsetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	"github.com/kairos-capi/kairos-capi/test/simnode"
	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

const (
	providerVersion = "v0.1.0"
	// kubernetesVersion is what the simulated nodes run (the envtest API server's version),
	// written as a k0s kubelet reports it, so that Cluster API sees the nodes up to date.
	kubernetesVersion = "v1.36.3+k0s"
)

func main() {
	name := flag.String("cluster", "demo", "name of the cluster created from cluster-template.yaml")
	workers := flag.Int64("workers", 2, "worker Machines of the cluster")
	infra := flag.String("infra", "sim", "infrastructure of the demo cluster: sim (simulated machines) or vsphere (the vSphere flavor through CAPV's own manager on a simulated vCenter, vcsim; needs root)")
	inPlace := flag.Bool("in-place", false, "run Cluster API with the RuntimeSDK and InPlaceUpdates feature gates and register the Kairos in-place update extension "+
		"for namespaces labelled "+harness.InPlaceNamespaceLabel+"=true (the cluster's namespace, default, is labelled)")
	restore := flag.Bool("restore", false, "give the control plane etcd snapshots every minute to an S3 object store the sandbox runs, and once the cluster is ready "+
		"demonstrate a restore: a ConfigMap written, the next snapshot taken, the control-plane VM destroyed, the ConfigMap read back from the restored cluster (-infra sim)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: sandbox [-cluster NAME] [-workers N] [-in-place] [-restore] [-infra sim|vsphere]   (make sandbox SANDBOX_ARGS=... IN_PLACE=1 RESTORE=1 INFRA=vsphere)\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	switch *infra {
	case infraSim:
	case infraVSphere:
		// CAPV drops loopback addresses: the vSphere sandbox runs in a network namespace of its
		// own, as test/vsphere does, after fetching (or building) CAPV outside it.
		if _, _, ok := vsphere.InNetns(); !ok {
			os.Exit(vsphere.ReexecInNetns("sandbox"))
		}
	default:
		fmt.Fprintf(os.Stderr, "sandbox: -infra %q: use sim or vsphere\n", *infra)
		os.Exit(2)
	}
	if *restore && *infra != infraSim {
		fmt.Fprintln(os.Stderr, "sandbox: -restore runs on the simulated infrastructure (-infra sim)")
		os.Exit(2)
	}
	if os.Getenv(sandboxChildEnv) == "" {
		if code, guarded := guard(); guarded {
			os.Exit(code)
		}
	}
	if err := run(*name, *workers, *inPlace, *restore, *infra); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// Infrastructures of the sandbox's cluster.
const (
	infraSim     = "sim"
	infraVSphere = "vsphere"
)

func run(clusterName string, workers int64, inPlace, restore bool, infra string) (reterr error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Output piped into a pager that quits must stop the sandbox cleanly, not kill it with
	// SIGPIPE before it stops its API servers. SIGPIPE is ignored, so a write to the closed
	// output fails with EPIPE, and the sandbox watches its output for the reader going away.
	// SIGPIPE itself cannot be the sign: once a program asks for it, Go delivers it for every
	// broken pipe or reset connection in the process (os/signal, "SIGPIPE"), and the
	// simulated nodes' connections break all the time, which used to stop the sandbox while it
	// scaled a control plane.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancelOutput := context.WithCancel(ctx)
	defer cancelOutput()
	// Runs last: a sandbox stopped by Ctrl-C or a closed output ends cleanly, whatever the
	// cancelled context made the steps still in progress return.
	defer func() {
		if ctx.Err() != nil && reterr != nil {
			reterr = nil
		}
	}()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			if outputClosed(os.Stdout) || outputClosed(os.Stderr) {
				cancelOutput()
				return
			}
		}
	}()
	l := framework.Logger()
	ctrl.SetLogger(l)
	klog.SetLogger(l)
	clusterctllog.SetLogger(l)

	dir, err := os.MkdirTemp("", "kairos-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	say("Building the clusterctl repositories of Cluster API and the Kairos providers (%s)", providerVersion)
	repos, err := clusterctlrepo.Build(filepath.Join(dir, "repository"), providerVersion)
	if err != nil {
		return err
	}

	say("Starting the management API server (the first run builds it from source, about 10 minutes)")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	crds := repos.CertManagerCRDs
	var capv *vsphereInfra
	if infra == infraVSphere {
		if capv, err = newVSphereInfra(); err != nil {
			return err
		}
		crds = append(crds, capv.crds...)
	}
	env, err := framework.Start(framework.Options{CRDs: crds, Scheme: scheme})
	if err != nil {
		return err
	}
	defer func() { reterr = errors.Join(reterr, env.Stop()) }()
	// A real management cluster collects garbage: deleting a cluster deletes what it owned.
	kcmDir, err := os.MkdirTemp("", "kairos-sandbox-kcm-")
	if err != nil {
		return err
	}
	kcm, err := env.StartControllerManager(kcmDir)
	if err != nil {
		return err
	}
	defer func() { reterr = errors.Join(reterr, kcm.Stop(10*time.Second), os.RemoveAll(kcmDir)) }()
	kubeconfig, err := env.AdminKubeconfig()
	if err != nil {
		return err
	}
	// The kubeconfig lives in the sandbox's folder; the documented path links to it while the
	// sandbox runs, and goes with it: it names API servers that no longer exist once it ends.
	ownKubeconfig := filepath.Join(dir, "management.kubeconfig")
	if err := os.WriteFile(ownKubeconfig, kubeconfig, 0o600); err != nil {
		return err
	}
	kubeconfigPath := kubeconfigLink()
	_ = os.Remove(kubeconfigPath) // an earlier sandbox's
	if err := os.Symlink(ownKubeconfig, kubeconfigPath); err != nil {
		return err
	}
	defer unpublishInto(kubeconfigPath, dir)
	// What a user applies to a workload cluster to deploy the (simulated) Kairos operator.
	operatorManifests := filepath.Join(dir, "kairos-operator.yaml")
	manifests, err := simnode.KairosOperatorManifests()
	if err != nil {
		return err
	}
	if err := os.WriteFile(operatorManifests, manifests, 0o644); err != nil {
		return err
	}

	// clusterctl reads template variables from the environment.
	password := os.Getenv("KAIROS_USER_PASSWORD")
	if password == "" {
		password = rand.String(16)
		if err := os.Setenv("KAIROS_USER_PASSWORD", password); err != nil {
			return err
		}
	}
	cc, err := clusterctlclient.New(ctx, repos.ConfigFile)
	if err != nil {
		return err
	}
	kc := clusterctlclient.Kubeconfig{Path: kubeconfigPath}
	// CAPV's CRDs were installed with the API server and its manager runs as a process below:
	// its components.yaml would need images and a cert-manager nobody runs here.
	var infraProviders []string
	if infra == infraSim {
		say("clusterctl init --core cluster-api --bootstrap kairos --control-plane kairos --infrastructure sim")
		infraProviders = []string{clusterctlrepo.SimProviderName + ":" + clusterctlrepo.SimVersion}
	} else {
		say("clusterctl init --core cluster-api --bootstrap kairos --control-plane kairos (CAPV %s: its CRDs are installed, its manager runs as a process)", vsphere.Version)
	}
	if _, err := cc.Init(ctx, clusterctlclient.InitOptions{
		Kubeconfig:              kc,
		CoreProvider:            "cluster-api:" + repos.CoreVersion,
		BootstrapProviders:      []string{clusterctlrepo.ProviderName + ":" + providerVersion},
		ControlPlaneProviders:   []string{clusterctlrepo.ProviderName + ":" + providerVersion},
		InfrastructureProviders: infraProviders,
		// No kubelet runs the Deployments: the controllers run in this process instead.
		WaitProviders: false,
	}); err != nil {
		return fmt.Errorf("clusterctl init: %w", err)
	}

	// clusterctl init returns once the providers' objects are created, not once their kinds are
	// served; the controllers set up below map their kinds as they start, and a kind discovery did
	// not list yet failed the sandbox ("no matches for kind KairosSimMachineList").
	if err := waitEstablished(ctx, env.Client, nil); err != nil {
		return err
	}

	// The installed webhook configurations call Services nobody backs here: point them at
	// this process, which serves every webhook below.
	wh := env.WebhookInstallOptions
	for label, keep := range map[string]func(string) bool{
		"cluster-api": harness.ServesCAPIWebhook, repo.Bootstrap.Label: nil, repo.ControlPlane.Label: nil,
	} {
		if err := clusterctlrepo.PointWebhooks(ctx, env.Client, label, wh.LocalServingPort, wh.LocalServingCAData, keep); err != nil {
			return err
		}
	}

	if inPlace {
		say("Starting Cluster API (feature gates RuntimeSDK, InPlaceUpdates), the Kairos providers, the in-place update extension and the simulated infrastructure")
	} else {
		say("Starting Cluster API, the Kairos providers and the simulated infrastructure")
	}
	var reg *simnode.Registry
	if capv != nil {
		if reg, err = simnode.NewRegistry(simnode.Options{AddressPrefix: vsphere.NodeAddressPrefix}); err != nil {
			return err
		}
		defer reg.Close()
	}
	h, err := harness.New(harness.Options{
		Env:            env,
		Registry:       reg,
		InPlaceUpdates: inPlace,
		AddToScheme:    []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			c, err := harness.ProviderClient(mgr)
			if err != nil {
				return err
			}
			return cpsetup.Setup(ctx, mgr, cpsetup.Options{Client: c, ClusterCache: cc, KairosControlPlaneConcurrency: 2, RuntimeClient: harness.RuntimeClientFrom(ctx)})
		}},
	})
	if err != nil {
		return err
	}
	defer func() { reterr = errors.Join(reterr, h.Stop()) }()
	if inPlace {
		// harness.New returned once Cluster API discovered the extension.
		say("In-place updates: ExtensionConfig %s registered; labelling namespace %s %s=true", harness.ExtensionConfigName, metav1.NamespaceDefault, harness.InPlaceNamespaceLabel)
		if err := h.OptIntoInPlaceUpdates(ctx, metav1.NamespaceDefault); err != nil {
			return err
		}
	}

	templatePath := filepath.Join(repos.Dir, repo.ControlPlane.Label, providerVersion, "cluster-template.yaml")
	version := kubernetesVersion
	if capv != nil {
		if err := capv.start(ctx, h, reg, dir); err != nil {
			return err
		}
		defer capv.stop()
		templatePath = filepath.Join(repos.Dir, repo.ControlPlane.Label, providerVersion, repo.TemplateFileName("vsphere"))
		version = vsphereKubernetesVersion
		// clusterctl reads the flavor's variables from the environment, as a user sets them.
		for k, v := range vsphere.FlavorVariables(capv.vc, clusterName, metav1.NamespaceDefault, "k0s", version, vsphereVIP, password) {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
	}
	say("clusterctl generate cluster %s --from %s | kubectl apply -f -", clusterName, templatePath)
	tmpl, err := cc.GetClusterTemplate(ctx, clusterctlclient.GetClusterTemplateOptions{
		Kubeconfig:               kc,
		URLSource:                &clusterctlclient.URLSourceOptions{URL: templatePath},
		ClusterName:              clusterName,
		TargetNamespace:          metav1.NamespaceDefault,
		KubernetesVersion:        version,
		ControlPlaneMachineCount: ptrTo(int64(1)),
		WorkerMachineCount:       ptrTo(workers),
	})
	if err != nil {
		return fmt.Errorf("generating the cluster: %w", err)
	}
	objs := tmpl.Objs()
	var demo *restoreDemo
	if restore {
		if demo, err = startRestoreDemo(); err != nil {
			return err
		}
		defer demo.stop()
		say("Restore: etcd snapshots every minute to s3://%s at %s (an object store in this process), credentials in Secret %s", restoreBucket, demo.store.Endpoint, restoreSecret)
		if objs, err = demo.withSnapshots(objs, metav1.NamespaceDefault); err != nil {
			return err
		}
	}
	for _, obj := range objs {
		o := obj.DeepCopy()
		if err := h.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}

	say("Waiting for cluster %s (Ctrl-C stops the sandbox)", clusterName)
	if err := watchCluster(ctx, cc, kc, h.Client, clusterName, 1+int(workers), os.Stdout); err != nil {
		if ctx.Err() != nil {
			// Ctrl-C (or a closed output) while waiting: a normal way to stop.
			say("Stopping")
			return nil
		}
		return err
	}

	if capv != nil {
		if err := capv.list(ctx, os.Stdout); err != nil {
			return err
		}
	}

	if inPlace {
		if err := upgradeInPlace(ctx, h, clusterName, dir, operatorManifests, os.Stdout); err != nil {
			if ctx.Err() != nil {
				say("Stopping")
				return nil
			}
			return err
		}
	}

	if demo != nil {
		if err := demo.run(ctx, h, clusterName, os.Stdout); err != nil {
			if ctx.Err() != nil {
				say("Stopping")
				return nil
			}
			return err
		}
	}

	fmt.Printf(`
The sandbox is running. Management cluster:

  export KUBECONFIG=%[1]s
  kubectl get clusters,kairoscontrolplanes,machines -A
  kubectl scale kairoscontrolplane %[2]s-control-plane --replicas=3
  kubectl get secret %[2]s-kubeconfig -o jsonpath='{.data.value}' | base64 -d > %[2]s.kubeconfig   # the workload cluster

Machines of your own clusters use the simulated infrastructure kinds KairosSimCluster,
KairosSimMachineTemplate and KairosSimMachine (infrastructure.cluster.x-k8s.io/v1beta2);
each simulated machine boots the Kairos document it is given. The cluster templates (flavors
default, k3s, ha, clusterctl generate cluster --from) are in %[4]s.
The login password of the template's nodes is %[3]q (KAIROS_USER_PASSWORD).

The Kairos operator, for in-place upgrades (make sandbox IN_PLACE=1), in any workload cluster:

  kubectl --kubeconfig %[2]s.kubeconfig apply -f %[5]s

Press Ctrl-C to stop everything.
`, kubeconfigPath, clusterName, password, filepath.Dir(templatePath), operatorManifests)
	if capv != nil {
		fmt.Printf(`
The management cluster, vcsim, CAPV and the Kairos VMs live in the sandbox's own network
namespace (CAPV drops loopback addresses; nothing there reaches or is reached from outside).
Run kubectl in it:

  nsenter --net=/proc/%d/ns/net kubectl --kubeconfig %s get vspheremachines,machines -A

`, os.Getpid(), kubeconfigPath)
	}
	<-ctx.Done()
	say("Stopping")
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// sandboxTmpDirEnv is the temporary folder of the sandbox's user, which the guard passes to the
// sandbox it runs with TMPDIR set to a folder of its own.
const sandboxTmpDirEnv = "KAIROS_SANDBOX_TMPDIR"

// kubeconfigLink is where the sandbox publishes its management kubeconfig (README, "The
// sandbox"): in the user's temporary folder, whatever TMPDIR the sandbox itself runs with.
func kubeconfigLink() string {
	dir := os.Getenv(sandboxTmpDirEnv)
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kairos-capi-sandbox.kubeconfig")
}

// unpublishInto removes the symbolic link at link if it points into dir: this sandbox's, not one
// that a sandbox started since then replaced it with.
func unpublishInto(link, dir string) {
	if target, err := os.Readlink(link); err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
		_ = os.Remove(link)
	}
}

// inPlaceVersion is what -in-place upgrades the demo cluster's control plane to, with the Kairos
// image that ships it.
const inPlaceVersion = "v1.37.0+k0s"

// upgradeInPlace demonstrates an in-place Kairos upgrade (README, "Upgrading in place"): it
// installs the Kairos operator in the workload cluster as a user would, applying its manifests
// (operatorManifests) with the cluster's kubeconfig, and changes the control plane's version and
// Kairos image with maxSurge 0, so that its Machine is upgraded where it stands, through Cluster
// API's UpdateMachine hook and a NodeOpUpgrade. It returns once the Machine runs the new version,
// and says whether it is the same Machine.
func upgradeInPlace(ctx context.Context, h *harness.Harness, clusterName, dir, operatorManifests string, w io.Writer) error {
	kubeconfig := filepath.Join(dir, clusterName+".kubeconfig")
	say("Installing the Kairos operator in the workload cluster: kubectl get secret %s-kubeconfig -o jsonpath='{.data.value}' | base64 -d > %s; kubectl --kubeconfig %s apply -f %s",
		clusterName, kubeconfig, kubeconfig, operatorManifests)
	if err := applyToWorkloadCluster(ctx, h.Client, clusterName, kubeconfig, operatorManifests); err != nil {
		return fmt.Errorf("installing the Kairos operator: %w", err)
	}
	before, err := controlPlaneMachine(ctx, h.Client, clusterName)
	if err != nil {
		return err
	}
	image := simnode.KairosImage(kairosrender.K0s, strings.TrimSuffix(inPlaceVersion, "+k0s"))
	kcp := &controlplanev1.KairosControlPlane{}
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: clusterName + "-control-plane"}, kcp); err != nil {
		return err
	}
	say("Upgrading in place: kubectl patch kairoscontrolplane %s --type merge -p '{\"spec\":{\"version\":%q,\"kairosConfigSpec\":{\"image\":%q},\"rollout\":{\"strategy\":{\"rollingUpdate\":{\"maxSurge\":0}}}}}'",
		kcp.Name, inPlaceVersion, image)
	patch := client.MergeFrom(kcp.DeepCopy())
	kcp.Spec.Version = inPlaceVersion
	kcp.Spec.KairosConfigSpec.Image = image
	kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptrTo(intstr.FromInt32(0))
	if err := h.Client.Patch(ctx, kcp, patch); err != nil {
		return err
	}
	last := ""
	for {
		m, err := controlPlaneMachine(ctx, h.Client, clusterName)
		if err == nil {
			status := fmt.Sprintf("Machine %s: version %s, UpToDate %s, Updating %s", m.Name, m.Spec.Version,
				conditionText(m, clusterv1.MachineUpToDateCondition), conditionText(m, clusterv1.MachineUpdatingCondition))
			if status != last {
				fmt.Fprintln(w, "    "+status)
				last = status
			}
			_, inProgress := m.Annotations[clusterv1.UpdateInProgressAnnotation]
			if m.Spec.Version == inPlaceVersion && !inProgress && conditions.IsTrue(m, clusterv1.MachineUpToDateCondition) {
				if m.UID == before.UID {
					say("Upgraded in place: Machine %s (node %s) runs %s with image %s; no Machine was created or deleted", m.Name, m.Status.NodeRef.Name, inPlaceVersion, image)
				} else {
					say("Machine %s replaced %s: the upgrade was not done in place", m.Name, before.Name)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// applyToWorkloadCluster does what a user does to apply manifests to a workload cluster: it
// writes the cluster's kubeconfig (its Secret <cluster>-kubeconfig) to kubeconfig, creates the
// manifests' objects with it (kubectl apply -f), and waits until the CustomResourceDefinitions
// among them are established (kubectl wait --for condition=established).
func applyToWorkloadCluster(ctx context.Context, mgmt client.Client, clusterName, kubeconfig, manifests string) error {
	secret := &corev1.Secret{}
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: clusterName + "-kubeconfig"}, secret); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, secret.Data["value"], 0o600); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	wl, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(manifests)
	if err != nil {
		return err
	}
	var crds []string
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s: %w", manifests, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := wl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, obj.GetName())
		}
	}
	return waitEstablished(ctx, wl, crds)
}

// waitEstablished waits until the CustomResourceDefinitions of names (every one, when names is
// empty) are established (kubectl wait --for condition=established): their kinds are served,
// and discovery, which controllers map kinds with when they are set up, has them.
func waitEstablished(ctx context.Context, c client.Client, names []string) error {
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
		if err := c.List(ctx, list); err == nil && allEstablished(list.Items, names) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// allEstablished tells whether every CRD of names (of crds, when names is empty) is among crds
// and established.
func allEstablished(crds []unstructured.Unstructured, names []string) bool {
	established := make(map[string]bool, len(crds))
	for i := range crds {
		established[crds[i].GetName()] = crdEstablished(&crds[i])
	}
	if len(names) == 0 {
		names = slices.Collect(maps.Keys(established))
	}
	for _, n := range names {
		if !established[n] {
			return false
		}
	}
	return true
}

func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, raw := range conds {
		if c, ok := raw.(map[string]any); ok && c["type"] == string(apiextensionsv1.Established) && c["status"] == string(apiextensionsv1.ConditionTrue) {
			return true
		}
	}
	return false
}

// controlPlaneMachine returns the demo cluster's only control-plane Machine.
func controlPlaneMachine(ctx context.Context, c client.Client, clusterName string) (*clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("%d control-plane Machines, want 1", len(list.Items))
	}
	return &list.Items[0], nil
}

func conditionText(m *clusterv1.Machine, typ string) string {
	c := conditions.Get(m, typ)
	if c == nil {
		return "unknown"
	}
	if c.Message != "" {
		return fmt.Sprintf("%s (%s: %s)", c.Status, c.Reason, c.Message)
	}
	return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
}

// watchCluster prints the cluster tree whenever it changes, until the control plane is available
// and every Machine runs.
func watchCluster(ctx context.Context, cc clusterctlclient.Client, kc clusterctlclient.Kubeconfig, c client.Client, name string, machines int, w io.Writer) error {
	last, lastStuck := "", ""
	for {
		objTree, err := cc.DescribeCluster(ctx, clusterctlclient.DescribeClusterOptions{
			Kubeconfig: kc, Namespace: metav1.NamespaceDefault, ClusterName: name, Grouping: false,
		})
		if err == nil {
			if s := render(objTree); s != last {
				fmt.Fprintf(w, "\n%s%s", time.Now().Format("15:04:05 "), s)
				last = s
			}
		}
		// A Machine that stays not ready: say why, in the words of its infrastructure machine
		// (where a simulated node reports what it refused or failed).
		if s := stuckMachines(ctx, c, name, time.Minute); s != "" && s != lastStuck {
			fmt.Fprintf(w, "%s", s)
			lastStuck = s
		}
		if ready(ctx, c, name, machines) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// stuckMachines describes the Machines of a cluster that have not been running for longer than
// after, with the false conditions of their infrastructure machines.
func stuckMachines(ctx context.Context, c client.Client, name string, after time.Duration) string {
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return ""
	}
	var b strings.Builder
	for _, m := range list.Items {
		if m.Status.Phase == string(clusterv1.MachinePhaseRunning) || time.Since(m.CreationTimestamp.Time) < after || !m.Spec.InfrastructureRef.IsDefined() {
			continue
		}
		infra, err := external.GetObjectFromContractVersionedRef(ctx, c, m.Spec.InfrastructureRef, m.Namespace)
		if err != nil {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(infra.Object, "status", "conditions")
		for _, raw := range conds {
			cond, ok := raw.(map[string]any)
			if !ok || cond["status"] != string(metav1.ConditionFalse) || cond["message"] == nil {
				continue
			}
			fmt.Fprintf(&b, "    Machine %s is %s: %s %s: %v\n", m.Name, m.Status.Phase, infra.GetKind(), cond["type"], cond["message"])
		}
	}
	return b.String()
}

func ready(ctx context.Context, c client.Client, name string, want int) bool {
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: name}, cluster); err != nil {
		return false
	}
	if !conditions.IsTrue(cluster, clusterv1.ClusterControlPlaneAvailableCondition) {
		return false
	}
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{clusterv1.ClusterNameLabel: name}); err != nil {
		return false
	}
	running := 0
	for _, m := range list.Items {
		if m.Status.Phase == string(clusterv1.MachinePhaseRunning) && m.Status.NodeRef.IsDefined() {
			running++
		}
	}
	return running == want
}

// render prints an object tree with each object's Ready (or Available) condition.
func render(t *tree.ObjectTree) string {
	var b strings.Builder
	var walk func(obj client.Object, prefix string)
	walk = func(obj client.Object, prefix string) {
		fmt.Fprintf(&b, "%s%s\n", prefix, describe(obj))
		children := t.GetObjectsByParent(obj.GetUID())
		sort.Slice(children, func(i, j int) bool {
			return children[i].GetObjectKind().GroupVersionKind().Kind+children[i].GetName() <
				children[j].GetObjectKind().GroupVersionKind().Kind+children[j].GetName()
		})
		for _, child := range children {
			walk(child, prefix+"  ")
		}
	}
	walk(t.GetRoot(), "")
	return b.String()
}

func describe(obj client.Object) string {
	name := obj.GetObjectKind().GroupVersionKind().Kind + "/" + obj.GetName()
	if tree.IsVirtualObject(obj) {
		name = tree.GetMetaName(obj)
	}
	getter, ok := obj.(conditions.Getter)
	if !ok {
		return name
	}
	for _, typ := range []string{clusterv1.AvailableCondition, clusterv1.ReadyCondition} {
		if c := conditions.Get(getter, typ); c != nil {
			msg := c.Reason
			if c.Status != metav1.ConditionTrue && c.Message != "" {
				msg = strings.SplitN(c.Message, "\n", 2)[0]
			}
			return fmt.Sprintf("%-50s %s=%s %s", name, typ, c.Status, msg)
		}
	}
	return name
}
