package flavors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/controllers/external"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/flavors"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
)

// provider is one infrastructure's CRDs as installed into the API server.
type provider struct {
	// from says where the CRDs come from, for the logs.
	from string
	// excluded is why the provider's kinds cannot be checked (no CRDs).
	excluded string
	crds     []*apiextensionsv1.CustomResourceDefinition
}

var (
	env *framework.Environment
	// strict creates with strict field validation: an unknown field is an error, not pruned.
	strict client.Client
	// providers by infrastructure name (repo.Infrastructure.Name).
	providers = map[string]*provider{}
	// templates is the control-plane release folder holding the cluster templates.
	templates string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(framework.Logger())
	start := time.Now()
	tmp, err := os.MkdirTemp("", "kairos-flavors-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	// The cluster templates exactly as a release ships them.
	root, err := framework.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rel, err := repo.Build(repo.Options{Root: root, Provider: repo.ControlPlane, Version: "v0.1.0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if templates, err = rel.Write(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	crds, err := loadCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	env, err = framework.Start(framework.Options{CRDs: crds, Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	strict = client.WithFieldValidation(env.Client, metav1.FieldValidationStrict)
	fmt.Fprintf(os.Stderr, "flavors: API server with %d CRDs ready after %s\n", len(crds), time.Since(start).Round(100*time.Millisecond))
	return m.Run()
}

// loadCRDs collects the CRDs of one API server: Cluster API's core, both Kairos providers,
// the sandbox's simulated infrastructure and every pinned infrastructure provider.
func loadCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	capi, err := framework.CAPICRDFiles()
	if err != nil {
		return nil, err
	}
	kairos, err := framework.ProjectCRDFiles("bootstrap", "controlplane")
	if err != nil {
		return nil, err
	}
	// Cluster API's and the Kairos CRD bases lack the contract labels clusterctl's
	// components YAML would give them: LoadCRDs adds them.
	all, err := framework.LoadCRDs(append(capi, kairos...)...)
	if err != nil {
		return nil, err
	}
	sim, err := infrastructure.CRDFiles()
	if err != nil {
		return nil, err
	}
	simCRDs, err := framework.LoadCRDs(sim...)
	if err != nil {
		return nil, err
	}
	providers[repo.SandboxInfrastructure.Name] = &provider{from: "test/infrastructure/config/crd/bases", crds: simCRDs}
	all = append(all, simCRDs...)

	names := make([]string, 0, len(flavors.Sources))
	for n := range flavors.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src := flavors.Sources[n]
		dir, excluded, err := src.Folder()
		if err != nil {
			return nil, fmt.Errorf("CRDs of %s: %w", n, err)
		}
		p := &provider{excluded: excluded}
		providers[n] = p
		if excluded != "" {
			continue
		}
		if p.crds, err = src.LoadCRDs(dir); err != nil {
			return nil, fmt.Errorf("CRDs of %s: %w", n, err)
		}
		p.from = fmt.Sprintf("%s@%s %s", src.Module, src.Version, src.Kustomization)
		if local := os.Getenv(src.LocalEnv); src.LocalEnv != "" && local != "" {
			p.from = fmt.Sprintf("%s=%s (a checkout of %s@%s)", src.LocalEnv, local, src.Module, src.Version)
		}
		all = append(all, p.crds...)
	}
	return all, nil
}

// crdOf returns the installed CRD of an infrastructure kind.
func (p *provider) crdOf(kind string) *apiextensionsv1.CustomResourceDefinition {
	for _, crd := range p.crds {
		if crd.Spec.Group == repo.InfrastructureGroup && crd.Spec.Names.Kind == kind {
			return crd
		}
	}
	return nil
}

// pass is one way of rendering a flavor.
type pass struct {
	name string
	// values of the variables; the others are unset.
	values map[string]string
}

func passes() []pass {
	all := repo.AllSamples()
	// A valid cluster name that YAML 1.1 reads as a boolean: every place the templates use
	// the name as a whole value must quote it, or the objects do not decode.
	all["CLUSTER_NAME"] = "on"
	return []pass{
		{"defaults", repo.RequiredSamples()}, // k0s, every default
		{"all-set", all},                     // k3s, every optional variable set
	}
}

// render runs `clusterctl generate cluster <CLUSTER_NAME> --target-namespace ns --from file`
// with the clusterctl library, with exactly the given variables set (as environment
// variables, the way a user sets them) and every other variable of the flavor unset.
func render(t *testing.T, file, ns string, values map[string]string) (clusterctl.Template, error) {
	t.Helper()
	ctx := context.Background()
	for name := range listVariables(t, file, ns) {
		if v, ok := values[name]; ok {
			t.Setenv(name, v)
		} else {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	opts := clusterctl.GetClusterTemplateOptions{
		ClusterName:       values["CLUSTER_NAME"],
		TargetNamespace:   ns,
		KubernetesVersion: values["KUBERNETES_VERSION"],
		URLSource:         &clusterctl.URLSourceOptions{URL: filepath.Join(templates, file)},
	}
	for name, field := range map[string]**int64{"CONTROL_PLANE_MACHINE_COUNT": &opts.ControlPlaneMachineCount, "WORKER_MACHINE_COUNT": &opts.WorkerMachineCount} {
		if v, ok := values[name]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			*field = &n
		}
	}
	return newClusterctl(t).GetClusterTemplate(ctx, opts)
}

// newClusterctl returns a clusterctl client that reads no user configuration and remembers
// nothing of earlier renders: clusterctl keeps its variables in viper's global instance, so
// a KUBERNETES_VERSION or machine count set for one render would otherwise leak into the
// next (one clusterctl command per process never notices).
func newClusterctl(t *testing.T) clusterctl.Client {
	t.Helper()
	viper.Reset()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	cfg := filepath.Join(t.TempDir(), "clusterctl.yaml")
	if err := os.WriteFile(cfg, []byte("providers: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := clusterctl.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// listVariables returns a flavor's variables and their defaults (nil: required), as
// `clusterctl generate cluster --list-variables` does.
func listVariables(t *testing.T, file, ns string) map[string]*string {
	t.Helper()
	listed, err := newClusterctl(t).GetClusterTemplate(context.Background(), clusterctl.GetClusterTemplateOptions{
		ClusterName: "x", TargetNamespace: ns, ListVariablesOnly: true,
		URLSource: &clusterctl.URLSourceOptions{URL: filepath.Join(templates, file)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return listed.VariableMap()
}

func sortedFlavors() []string {
	var out []string
	for f := range repo.FlavorInfrastructure {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// Every shipped flavor is rendered by clusterctl and every object it creates passes the
// API server's validation with the real CRDs of its infrastructure provider, strictly; its
// infrastructure machine templates clone into infrastructure machines the API server
// accepts without losing a field.
func TestFlavors(t *testing.T) {
	// Every template the release ships is a flavor this test knows.
	entries, err := os.ReadDir(templates)
	if err != nil {
		t.Fatal(err)
	}
	shipped := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "cluster-template") {
			shipped++
			flavor := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(e.Name(), "cluster-template"), "-"), ".yaml")
			if flavor == "" {
				flavor = "default"
			}
			if _, ok := repo.FlavorInfrastructure[flavor]; !ok {
				t.Errorf("the release ships %s, whose flavor %q this test does not know", e.Name(), flavor)
			}
		}
	}
	if shipped != len(repo.FlavorInfrastructure) {
		t.Errorf("the release ships %d templates, FlavorInfrastructure lists %d flavors", shipped, len(repo.FlavorInfrastructure))
	}

	for _, flavor := range sortedFlavors() {
		infra := repo.FlavorInfrastructure[flavor]
		p := providers[infra.Name]
		t.Run(flavor, func(t *testing.T) {
			if p == nil {
				t.Fatalf("no CRD source for infrastructure %q: add it to flavors.Sources", infra.Name)
			}
			if p.excluded != "" {
				msg := fmt.Sprintf("NOT CHECKED against %s's CRDs (its %s objects are left out of the dry-run and the cloning): %s",
					infra.Name, strings.Join(infra.Kinds(), ", "), p.excluded)
				if os.Getenv("KAIROS_FLAVORS_REQUIRE_ALL") != "" {
					t.Error(msg)
				} else {
					t.Log(msg)
				}
			} else {
				t.Logf("%s kinds checked against %s", infra.Name, p.from)
			}
			for _, ps := range passes() {
				t.Run(ps.name, func(t *testing.T) { checkFlavor(t, flavor, infra, p, ps) })
			}
		})
	}
}

func checkFlavor(t *testing.T, flavor string, infra repo.Infrastructure, p *provider, ps pass) {
	ctx := context.Background()
	ns := framework.NewNamespace(t, env.Client, flavor+"-"+ps.name+"-")
	tmpl, err := render(t, repo.TemplateFileName(flavor), ns, ps.values)
	if err != nil {
		t.Fatalf("clusterctl generate cluster: %v", err)
	}
	objs := tmpl.Objs()
	if len(objs) == 0 {
		t.Fatal("the flavor renders no object")
	}
	wantDistribution := "k0s"
	if ps.values["KAIROS_DISTRIBUTION"] == "k3s" || flavor == "k3s" {
		wantDistribution = "k3s"
	}
	for name, d := range distributions(objs) {
		if d != wantDistribution {
			t.Errorf("%s: distribution %s, want %s", name, d, wantDistribution)
		}
	}
	// Machine counts come from the variables of this render only.
	count := func(name, def string) string {
		if v, ok := ps.values[name]; ok {
			return v
		}
		return def
	}
	wantCP, wantWorkers := count("CONTROL_PLANE_MACHINE_COUNT", "1"), count("WORKER_MACHINE_COUNT", "0")
	if flavor == "ha" {
		wantCP = count("KAIROS_HA_CONTROL_PLANE_MACHINE_COUNT", "3")
	}
	for _, o := range objs {
		var got []any
		switch o.GetKind() {
		case "KairosControlPlane":
			r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
			got = []any{r, wantCP}
		case "MachineDeployment":
			r, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
			got = []any{r, wantWorkers}
		case "Cluster":
			if r, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "topology", "controlPlane", "replicas"); found {
				got = []any{r, wantCP}
			}
		}
		if len(got) == 2 && fmt.Sprint(got[0]) != got[1] {
			t.Errorf("%s %s: replicas %v, want %v", o.GetKind(), o.GetName(), got[0], got[1])
		}
	}

	// What a real provider needs beyond its CRDs. The flavors without a load balancer hold the
	// endpoint as a virtual IP, with a VRRP router ID per cluster (KAIROS_VRRP_ROUTER_ID; two
	// k0s clusters on one network must not share one). CAPMOX must not wait for `cloud-init
	// status` through the guest agent: a Kairos node has no cloud-init (yip reads the data).
	for _, o := range objs {
		switch o.GetKind() {
		case "KairosControlPlane":
			_, vip, _ := unstructured.NestedMap(o.Object, "spec", "kairosConfigSpec", "virtualIP")
			if want := slices.Contains([]string{"vsphere", "metal3", "proxmox"}, flavor); vip != want {
				t.Errorf("%s: virtualIP set = %v, want %v", o.GetName(), vip, want)
			}
			if vip {
				id, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "kairosConfigSpec", "virtualIP", "virtualRouterID")
				if want := count("KAIROS_VRRP_ROUTER_ID", "51"); fmt.Sprint(id) != want {
					t.Errorf("%s: virtualIP.virtualRouterID %v, want %s", o.GetName(), id, want)
				}
			}
		case "ProxmoxMachineTemplate":
			if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "checks", "skipCloudInitStatus"); !skip {
				t.Errorf("%s: CAPMOX would wait for cloud-init's status, which a Kairos node never reports: set checks.skipCloudInitStatus", o.GetName())
			}
		}
	}

	applied, skipped := 0, 0
	for i := range objs {
		o := &objs[i]
		name := fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
		if o.GroupVersionKind().Group == repo.InfrastructureGroup {
			if p.excluded != "" {
				skipped++
				t.Logf("not checked: %s (%s)", name, o.GetAPIVersion())
				continue
			}
			crd := p.crdOf(o.GetKind())
			if crd == nil {
				t.Errorf("%s: %s has no such kind", name, p.from)
				continue
			}
			if storage := storageVersion(crd); o.GroupVersionKind().Version != storage {
				t.Errorf("%s is written at %s; its CRD stores %s (the test installs no conversion webhook)", name, o.GroupVersionKind().Version, storage)
			}
		}
		if err := strict.Create(ctx, o.DeepCopy(), client.DryRunAll); err != nil {
			t.Errorf("server-side dry-run of %s: %v", name, err)
			continue
		}
		applied++
	}
	t.Logf("%d objects accepted by server-side dry-run with strict field validation, %d not checked", applied, skipped)
	if p.excluded == "" && skipped > 0 {
		t.Errorf("%d objects were not checked", skipped)
	}
	if p.excluded != "" {
		return
	}
	cloneTemplates(t, ns, infra, p, objs)
}

// distributions returns the distribution each Kairos object of a template asks for (the
// KairosControlPlane, the workers' KairosConfigTemplate) or, for a Cluster with a topology,
// the class variable it sets.
func distributions(objs []unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		name := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "KairosControlPlane":
			out[name], _, _ = unstructured.NestedString(o.Object, "spec", "distribution")
		case "KairosConfigTemplate":
			if !slices.ContainsFunc(objs, func(u unstructured.Unstructured) bool { return u.GetKind() == "ClusterClass" }) {
				out[name], _, _ = unstructured.NestedString(o.Object, "spec", "template", "spec", "distribution")
			}
		case "Cluster":
			vars, _, _ := unstructured.NestedSlice(o.Object, "spec", "topology", "variables")
			for _, v := range vars {
				if m, ok := v.(map[string]any); ok && m["name"] == "distribution" {
					out[name] = fmt.Sprint(m["value"])
				}
			}
		}
	}
	return out
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// cloneTemplates creates the flavor's infrastructure templates for real and clones each the
// way Cluster API's controllers and the KairosControlPlane controller do: the API version
// Cluster API resolves from the CRD's contract labels, then external.CreateFromTemplate. The
// clone must be accepted (strictly) and keep every field of the template.
func cloneTemplates(t *testing.T, ns string, infra repo.Infrastructure, p *provider, objs []unstructured.Unstructured) {
	ctx := context.Background()
	var cloned []string
	for i := range objs {
		o := &objs[i]
		kind := o.GetKind()
		if o.GroupVersionKind().Group != repo.InfrastructureGroup || (kind != infra.MachineTemplateKind && kind != infra.ClusterTemplateKind) {
			continue
		}
		if err := strict.Create(ctx, o.DeepCopy()); err != nil {
			t.Errorf("creating %s %s: %v", kind, o.GetName(), err)
			continue
		}
		ref := clusterv1.ContractVersionedObjectReference{APIGroup: repo.InfrastructureGroup, Kind: kind, Name: o.GetName()}
		template, err := external.GetObjectFromContractVersionedRef(ctx, env.Client, ref, ns)
		if err != nil {
			t.Errorf("Cluster API cannot read %s %s through its contract labels: %v", kind, o.GetName(), err)
			continue
		}
		if template.GetAPIVersion() != o.GetAPIVersion() {
			t.Errorf("Cluster API reads %s at %s, the flavor writes %s", kind, template.GetAPIVersion(), o.GetAPIVersion())
		}
		clone, cloneRef, err := external.CreateFromTemplate(ctx, &external.CreateFromTemplateInput{
			Client: strict,
			TemplateRef: &corev1.ObjectReference{
				APIVersion: template.GetAPIVersion(), Kind: kind, Namespace: ns, Name: template.GetName(),
			},
			Namespace:   ns,
			Name:        o.GetName() + "-abcde",
			ClusterName: "release-check",
			OwnerRef: &metav1.OwnerReference{
				APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KairosControlPlane",
				Name: "release-check-control-plane", UID: types.UID("00000000-0000-0000-0000-000000000001"),
			},
			Labels: map[string]string{clusterv1.ClusterNameLabel: "release-check", clusterv1.MachineControlPlaneLabel: ""},
		})
		if err != nil {
			t.Errorf("cloning %s %s: %v", kind, o.GetName(), err)
			continue
		}
		if want := strings.TrimSuffix(kind, "Template"); cloneRef.Kind != want || cloneRef.APIGroup != repo.InfrastructureGroup {
			t.Errorf("the clone of %s is a %s/%s, want %s", kind, cloneRef.APIGroup, cloneRef.Kind, want)
		}
		stored := &unstructured.Unstructured{}
		stored.SetGroupVersionKind(clone.GroupVersionKind())
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(clone), stored); err != nil {
			t.Fatal(err)
		}
		want, _, _ := unstructured.NestedMap(template.Object, "spec", "template", "spec")
		got, _, _ := unstructured.NestedMap(stored.Object, "spec")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the clone %s %s does not hold its template's spec:\n got %v\nwant %v", clone.GetKind(), clone.GetName(), got, want)
		}
		cloned = append(cloned, fmt.Sprintf("%s %s -> %s %s", kind, o.GetName(), clone.GetKind(), clone.GetName()))
	}
	if !slices.ContainsFunc(cloned, func(s string) bool { return strings.HasPrefix(s, infra.MachineTemplateKind+" ") }) {
		t.Errorf("no %s was cloned", infra.MachineTemplateKind)
	}
	t.Logf("cloned with external.CreateFromTemplate: %s", strings.Join(cloned, "; "))
}
