package repo

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func buildRelease(t *testing.T, p Provider, version string) *Release {
	t.Helper()
	r, err := Build(Options{Root: root(t), Provider: p, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReleaseFiles(t *testing.T) {
	b := buildRelease(t, Bootstrap, "v0.1.0")
	if got, want := b.FileNames(), []string{"bootstrap-components.yaml", "metadata.yaml"}; !reflect.DeepEqual(got, want) {
		t.Errorf("bootstrap files: got %v, want %v", got, want)
	}
	cp := buildRelease(t, ControlPlane, "v0.2.0")
	want := controlPlaneFiles()
	if got := cp.FileNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("control-plane files: got %v, want %v", got, want)
	}
	if !strings.Contains(string(cp.Files["control-plane-components.yaml"]), "${KAIROS_CONTROLPLANE_IMAGE:=ghcr.io/kairos-capi/kairos-controlplane-manager:v0.2.0}") {
		t.Error("the control-plane components do not run the v0.2.0 image")
	}
	// The in-place update extension's registration ships beside the components (not in them:
	// Cluster API refuses ExtensionConfigs without its RuntimeSDK gate); test/components checks
	// that it points at what the components install.
	ext := string(cp.Files["control-plane-extension.yaml"])
	for _, s := range []string{"kind: ExtensionConfig", "runtime.cluster.x-k8s.io/inject-ca-from-secret: kairos-controlplane-system/kairos-controlplane-webhook-service-cert"} {
		if !strings.Contains(ext, s) {
			t.Errorf("control-plane-extension.yaml lacks %q:\n%s", s, ext)
		}
	}
	md := string(cp.Files["metadata.yaml"])
	for _, s := range []string{"apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3", "kind: Metadata", "minor: 1", "minor: 2", "contract: v1beta2"} {
		if !strings.Contains(md, s) {
			t.Errorf("metadata.yaml lacks %q:\n%s", s, md)
		}
	}
}

// Every CRD of a built release names the release under the provider's own annotation (the
// constant of its API module), and carries no other provider's: the control-plane provider
// reads the bootstrap provider's to enforce its version-skew policy.
func TestReleaseStampsEveryCRD(t *testing.T) {
	for _, p := range []Provider{Bootstrap, ControlPlane} {
		t.Run(p.Name, func(t *testing.T) {
			r := buildRelease(t, p, "v0.2.0")
			objs, err := ParseObjects(r.Files[p.ComponentsFile])
			if err != nil {
				t.Fatal(err)
			}
			other := ControlPlane
			if p.Name == ControlPlane.Name {
				other = Bootstrap
			}
			crds := 0
			for _, o := range objs {
				if o.GetKind() != "CustomResourceDefinition" {
					continue
				}
				crds++
				if got := o.GetAnnotations()[p.ReleaseAnnotation]; got != "v0.2.0" {
					t.Errorf("%s: annotation %s is %q, want v0.2.0", o.GetName(), p.ReleaseAnnotation, got)
				}
				if got, ok := o.GetAnnotations()[other.ReleaseAnnotation]; ok {
					t.Errorf("%s: carries the %s provider's annotation %s=%q", o.GetName(), other.Name, other.ReleaseAnnotation, got)
				}
			}
			if crds < 2 {
				t.Errorf("want the provider's CRDs in the components, got %d", crds)
			}
		})
	}
	if Bootstrap.ReleaseAnnotation != "bootstrap.cluster.x-k8s.io/kairos-release" || ControlPlane.ReleaseAnnotation != "controlplane.cluster.x-k8s.io/kairos-release" {
		t.Errorf("release annotations are %q and %q", Bootstrap.ReleaseAnnotation, ControlPlane.ReleaseAnnotation)
	}
}

// One output folder holds several versions of both providers: adding a release keeps the
// others, and rebuilding a version replaces only that version.
func TestWriteKeepsOtherVersionsAndProviders(t *testing.T) {
	out := t.TempDir()
	for _, rel := range []struct {
		p Provider
		v string
	}{{Bootstrap, "v0.1.0"}, {ControlPlane, "v0.1.0"}, {Bootstrap, "v0.2.0"}, {ControlPlane, "v0.2.0"}} {
		dir, err := buildRelease(t, rel.p, rel.v).Write(out)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(out, rel.p.Label, rel.v); dir != want {
			t.Errorf("written to %s, want %s", dir, want)
		}
	}
	// A stray file in a version folder disappears when that version is rebuilt, and only there.
	stray := filepath.Join(out, "bootstrap-kairos", "v0.2.0", "stray.yaml")
	keep := filepath.Join(out, "bootstrap-kairos", "v0.1.0", "keep.yaml")
	for _, f := range []string{stray, keep} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := buildRelease(t, Bootstrap, "v0.2.0").Write(out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rebuilding v0.2.0 kept %s", stray)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("rebuilding v0.2.0 touched v0.1.0: %v", err)
	}

	got := tree(t, out)
	want := []string{
		"bootstrap-kairos/v0.1.0/bootstrap-components.yaml",
		"bootstrap-kairos/v0.1.0/keep.yaml",
		"bootstrap-kairos/v0.1.0/metadata.yaml",
		"bootstrap-kairos/v0.2.0/bootstrap-components.yaml",
		"bootstrap-kairos/v0.2.0/metadata.yaml",
	}
	for _, v := range []string{"v0.1.0", "v0.2.0"} {
		for _, f := range controlPlaneFiles() {
			want = append(want, "control-plane-kairos/"+v+"/"+f)
		}
	}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("repository tree:\n got %v\nwant %v", got, want)
	}
}

// controlPlaneFiles are the files of a control-plane release, sorted: one cluster template
// per required flavor, the components and the metadata.
func controlPlaneFiles() []string {
	files := []string{"control-plane-components.yaml", "control-plane-extension.yaml", "metadata.yaml"}
	for _, f := range RequiredFlavors {
		files = append(files, TemplateFileName(f))
	}
	sort.Strings(files)
	return files
}

func tree(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func TestVersionRules(t *testing.T) {
	cases := []struct {
		version, rule, inMessage string
	}{
		{"v0.3.0", RuleMetadataSeries, "release/metadata/bootstrap.yaml"},
		{"v1.0.0", RuleMetadataSeries, "major: 1"},
		{"0.1.0", RuleVersion, "must start with v"},
		{"v0.1", RuleVersion, "not a semantic version"},
		{"v0.1.0+build.1", RuleVersion, "build metadata"},
	}
	for _, c := range cases {
		t.Run(c.version, func(t *testing.T) {
			_, err := Build(Options{Root: root(t), Provider: Bootstrap, Version: c.version})
			if !HasRule(err, c.rule) {
				t.Fatalf("want a violation of %s, got %v", c.rule, err)
			}
			if !strings.Contains(err.Error(), c.inMessage) {
				t.Errorf("the error should mention %q: %v", c.inMessage, err)
			}
		})
	}
	// Pre-releases of a listed series are fine.
	buildRelease(t, ControlPlane, "v0.2.1-rc.0")
}

func TestEachProviderHasItsOwnSeries(t *testing.T) {
	r := root(t)
	// Give the control plane a series the bootstrap provider does not have.
	tmp := t.TempDir()
	copyTree(t, r, tmp, "release/metadata", "bootstrap", "controlplane", "config", "go.work")
	md := filepath.Join(tmp, ControlPlane.MetadataFile)
	data, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "releaseSeries:\n", "releaseSeries:\n- major: 0\n  minor: 3\n  contract: v1beta2\n", 1))
	if err := os.WriteFile(md, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(Options{Root: tmp, Provider: ControlPlane, Version: "v0.3.0"}); err != nil {
		t.Errorf("control plane v0.3.0 with series 0.3 listed: %v", err)
	}
	if _, err := Build(Options{Root: tmp, Provider: Bootstrap, Version: "v0.3.0"}); !HasRule(err, RuleMetadataSeries) {
		t.Errorf("bootstrap v0.3.0 without series 0.3: want %s, got %v", RuleMetadataSeries, err)
	}
}

func TestMetadataRules(t *testing.T) {
	const good = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contract: v1beta2\n"
	if _, vs := LoadMetadata("m.yaml", []byte(good)); len(vs) != 0 {
		t.Fatalf("good metadata: %v", vs)
	}
	cases := map[string]string{
		"wrong apiVersion": strings.Replace(good, "v1alpha3", "v1alpha4", 1),
		"wrong kind":       strings.Replace(good, "kind: Metadata", "kind: Meta", 1),
		"no series":        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries: []\n",
		"series twice":     good + "- major: 0\n  minor: 1\n  contract: v1beta2\n",
		"other contract":   strings.Replace(good, "contract: v1beta2", "contract: v1beta1", 1),
		"unknown field":    good + "extra: true\n",
		"not YAML":         "releaseSeries: [",
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, vs := LoadMetadata("m.yaml", []byte(data))
			expectRule(t, vs, RuleMetadata, "")
		})
	}
}

func TestLookup(t *testing.T) {
	for _, name := range []string{"bootstrap", "bootstrap-kairos"} {
		if p, err := Lookup(name); err != nil || p.Label != "bootstrap-kairos" {
			t.Errorf("Lookup(%q) = %v, %v", name, p.Label, err)
		}
	}
	if p, err := Lookup("controlplane"); err != nil || p.Label != "control-plane-kairos" || p.Tag("v0.2.0") != "controlplane/v0.2.0" {
		t.Errorf("Lookup(controlplane) = %+v, %v", p, err)
	}
	if _, err := Lookup("kubeadm"); err == nil || !strings.Contains(err.Error(), "bootstrap, controlplane") {
		t.Errorf("Lookup(kubeadm) should list the providers, got %v", err)
	}
}

// copyTree copies the named entries of src (files or folders) into dst.
func copyTree(t *testing.T, src, dst string, entries ...string) {
	t.Helper()
	for _, e := range entries {
		err := filepath.WalkDir(filepath.Join(src, e), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			target := filepath.Join(dst, rel)
			if d.IsDir() {
				return os.MkdirAll(target, 0o755)
			}
			if !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".md") && filepath.Base(path) != "go.work" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestQuoteNames(t *testing.T) {
	in := "metadata:\n  labels:\n    cluster.x-k8s.io/cluster-name: ${CLUSTER_NAME}\n  name: ${CLUSTER_NAME}-md-0\n  namespace: ${NAMESPACE}\nitems:\n- ${CLUSTER_NAME}\nreplicas: ${WORKER_MACHINE_COUNT}\n"
	want := "metadata:\n  labels:\n    cluster.x-k8s.io/cluster-name: \"${CLUSTER_NAME}\"\n  name: ${CLUSTER_NAME}-md-0\n  namespace: \"${NAMESPACE}\"\nitems:\n- \"${CLUSTER_NAME}\"\nreplicas: ${WORKER_MACHINE_COUNT}\n"
	if got := string(quoteNames([]byte(in))); got != want {
		t.Errorf("quoteNames:\n%s\nwant:\n%s", got, want)
	}
}
