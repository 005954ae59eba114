package repo_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/repository"

	"github.com/kairos-capi/kairos-capi/release/repo"
)

// The real clusterctl library (v1.14) reads what the release tool writes: versions from a
// tree holding two versions of both providers, metadata, components (also into another
// target namespace) and every cluster template through `generate cluster --from`.
func TestClusterctlReadsTheRepository(t *testing.T) {
	ctx := context.Background()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	root, err := repo.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, p := range []repo.Provider{repo.Bootstrap, repo.ControlPlane} {
		for _, v := range []string{"v0.1.0", "v0.2.0"} {
			r, err := repo.Build(repo.Options{Root: root, Provider: p, Version: v})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Write(out); err != nil {
				t.Fatal(err)
			}
		}
	}

	cfgPath := filepath.Join(t.TempDir(), "clusterctl.yaml")
	cfg := fmt.Sprintf(`providers:
- name: kairos
  type: BootstrapProvider
  url: file://%[1]s/bootstrap-kairos/v0.2.0/bootstrap-components.yaml
- name: kairos
  type: ControlPlaneProvider
  url: file://%[1]s/control-plane-kairos/v0.2.0/control-plane-components.yaml
KAIROS_USER_PASSWORD: not-a-real-password
`, out)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	configClient, err := config.New(ctx, cfgPath)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		p    repo.Provider
		typ  clusterctlv1.ProviderType
		ns   string
		repo string
	}{
		{repo.Bootstrap, clusterctlv1.BootstrapProviderType, "kairos-bootstrap-system", "ghcr.io/kairos-capi/kairos-bootstrap-manager"},
		{repo.ControlPlane, clusterctlv1.ControlPlaneProviderType, "kairos-controlplane-system", "ghcr.io/kairos-capi/kairos-controlplane-manager"},
	} {
		t.Run(tc.p.Label, func(t *testing.T) {
			pc, err := configClient.Providers().Get("kairos", tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			if pc.ManifestLabel() != tc.p.Label {
				t.Errorf("clusterctl labels the provider %q, the release tool %q", pc.ManifestLabel(), tc.p.Label)
			}
			rc, err := repository.New(ctx, pc, configClient)
			if err != nil {
				t.Fatal(err)
			}
			versions, err := rc.GetVersions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(versions)
			if !reflect.DeepEqual(versions, []string{"v0.1.0", "v0.2.0"}) {
				t.Errorf("clusterctl sees versions %v", versions)
			}

			for _, v := range versions {
				md, err := rc.Metadata(v).Get(ctx)
				if err != nil {
					t.Fatalf("metadata of %s: %v", v, err)
				}
				if md.GetReleaseSeriesForContract("v1beta2") == nil {
					t.Errorf("metadata of %s maps no series to v1beta2", v)
				}

				comps, err := c.GetProviderComponents(ctx, "kairos:"+v, tc.typ, client.ComponentsOptions{})
				if err != nil {
					t.Fatalf("components of %s: %v", v, err)
				}
				if comps.TargetNamespace() != tc.ns {
					t.Errorf("target namespace %q, want %q", comps.TargetNamespace(), tc.ns)
				}
				if want := tc.repo + ":" + v; !slices.Contains(comps.Images(), want) {
					t.Errorf("images %v, want %s", comps.Images(), want)
				}
				if !slices.Contains(comps.Variables(), tc.p.ImageVariable) {
					t.Errorf("variables %v lack %s", comps.Variables(), tc.p.ImageVariable)
				}
				for _, o := range comps.Objs() {
					if o.GetLabels()["cluster.x-k8s.io/provider"] != tc.p.Label {
						t.Errorf("%s %s: provider label %q", o.GetKind(), o.GetName(), o.GetLabels()["cluster.x-k8s.io/provider"])
					}
				}
			}

			// clusterctl init --target-namespace moves everything namespaced, references included.
			comps, err := c.GetProviderComponents(ctx, "kairos:v0.1.0", tc.typ, client.ComponentsOptions{TargetNamespace: "custom"})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range comps.Objs() {
				if ns := o.GetNamespace(); ns != "" && ns != "custom" {
					t.Errorf("%s %s stays in %q", o.GetKind(), o.GetName(), ns)
				}
				if o.GetKind() == "Namespace" && o.GetName() != "custom" {
					t.Errorf("Namespace %s", o.GetName())
				}
			}
		})
	}

	templates := filepath.Join(out, "control-plane-kairos", "v0.2.0")
	for _, tc := range []struct {
		file                 string
		controlPlaneReplicas int64
		kinds                []string
	}{
		{"cluster-template.yaml", 1, []string{"Cluster", "KairosControlPlane", "MachineDeployment", "KairosConfigTemplate", "KairosSimCluster", "KairosSimMachineTemplate", "Secret"}},
		{"cluster-template-k3s.yaml", 1, []string{"Cluster", "KairosControlPlane", "MachineDeployment"}},
		{"cluster-template-ha.yaml", 3, []string{"Cluster", "KairosControlPlane", "MachineDeployment", "MachineHealthCheck"}},
		{"cluster-template-clusterclass.yaml", 0, []string{"ClusterClass", "Cluster", "KairosControlPlaneTemplate", "KairosConfigTemplate", "KairosSimClusterTemplate", "KairosSimMachineTemplate", "Secret"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(templates, tc.file)
			tmpl, err := c.GetClusterTemplate(ctx, client.GetClusterTemplateOptions{
				ClusterName:       "demo",
				TargetNamespace:   "demo-ns",
				KubernetesVersion: "v1.31.2",
				URLSource:         &client.URLSourceOptions{URL: path},
			})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, o := range tmpl.Objs() {
				kinds[o.GetKind()]++
				if o.GetNamespace() != "demo-ns" {
					t.Errorf("%s %s is in %q", o.GetKind(), o.GetName(), o.GetNamespace())
				}
				if strings.Contains(o.GetName(), "$") || !strings.Contains(o.GetName(), "demo") && o.GetKind() != "ClusterClass" && !strings.HasPrefix(o.GetName(), "kairos") {
					t.Errorf("%s %q: unexpected name", o.GetKind(), o.GetName())
				}
				switch o.GetKind() {
				case "KairosControlPlane":
					// clusterctl decodes numbers as float64.
					replicas, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
					if fmt.Sprint(replicas) != fmt.Sprint(tc.controlPlaneReplicas) {
						t.Errorf("control plane replicas %v, want %d", replicas, tc.controlPlaneReplicas)
					}
				case "Secret":
					if v, _, _ := unstructured.NestedString(o.Object, "stringData", "value"); v != "not-a-real-password" || o.GetName() != "demo-kairos-login" {
						t.Errorf("login Secret %s value %q", o.GetName(), v)
					}
				}
			}
			for _, k := range tc.kinds {
				if kinds[k] == 0 {
					t.Errorf("no %s in %v", k, kinds)
				}
			}

			// Without the password, clusterctl names the missing variable.
			listed, err := c.GetClusterTemplate(ctx, client.GetClusterTemplateOptions{
				ClusterName: "demo", TargetNamespace: "demo-ns", ListVariablesOnly: true,
				URLSource: &client.URLSourceOptions{URL: path},
			})
			if err != nil {
				t.Fatal(err)
			}
			var required []string
			for name, def := range listed.VariableMap() {
				if def == nil {
					required = append(required, name)
				}
			}
			slices.Sort(required)
			if want := []string{"CLUSTER_NAME", "KAIROS_USER_PASSWORD", "KUBERNETES_VERSION", "NAMESPACE"}; !reflect.DeepEqual(required, want) {
				t.Errorf("required variables %v, want %v", required, want)
			}
		})
	}
}
