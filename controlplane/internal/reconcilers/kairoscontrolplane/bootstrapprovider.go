package kairoscontrolplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/contract"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
)

// The version-skew policy between the two providers (README, "Version skew"): a control plane
// of release vX.Y works with a bootstrap provider of the same major release whose minor release
// is Y-1, Y or Y+1, serving a KairosConfig API version of Cluster API contract v1beta2 that this
// control plane can write. One minor either way is what upgrading one provider at a time needs,
// in either order; further apart, the two have never been tested together. The bootstrap
// provider does not depend on the control plane, so only the control plane checks.
const bootstrapMinorSkew = 1

// contractVersion is the Cluster API contract both providers implement.
const contractVersion = "v1beta2"

// writableConfigVersions are the KairosConfig API versions this control plane can create,
// newest first.
var writableConfigVersions = []string{bootstrapv1.GroupVersion.Version}

// kairosConfigCRDName is the name of the KairosConfig CRD.
var kairosConfigCRDName = contract.CalculateCRDName(bootstrapv1.GroupVersion.Group, "KairosConfig")

// bootstrapProvider is what the control plane knows of the installed bootstrap provider, from
// its KairosConfig CRD.
type bootstrapProvider struct {
	// apiVersion is the KairosConfig apiVersion new KairosConfigs are created with.
	apiVersion string
	// release is the bootstrap provider release that installed the CRD; empty when the CRD does
	// not say (it was not installed from a release).
	release string
	// contractVersions are the versions the CRD's contract label lists; served and storage are
	// the CRD's served versions and its storage version.
	contractVersions, served []string
	storage                  string
	// problem says why the installed provider is outside the policy; empty when it is inside.
	problem string
}

// compatible tells whether Machines may be created.
func (b *bootstrapProvider) compatible() bool { return b != nil && b.problem == "" }

// summary describes the installed provider for the condition.
func (b *bootstrapProvider) summary() string {
	release := b.release
	if release == "" {
		release = "of unknown release (its CRD names none)"
	}
	return fmt.Sprintf("bootstrap provider %s: KairosConfig CRD for contract %s %s, served %s, storage %s",
		release, contractVersion, strings.Join(b.contractVersions, ","), strings.Join(b.served, ","), b.storage)
}

// kairosConfigCRD is what the policy reads of the KairosConfig CRD.
type kairosConfigCRD struct {
	labels, annotations map[string]string
	versions            []crdVersion
}

type crdVersion struct {
	name            string
	served, storage bool
}

// bootstrapProviderCache remembers the installed KairosConfig CRD per resourceVersion: the
// CRD's metadata comes from the cache, its spec (served and storage versions) is read from the
// API server only when the CRD changed.
type bootstrapProviderCache struct {
	mu              sync.Mutex
	resourceVersion string
	crd             *kairosConfigCRD
}

// loadBootstrapProvider reads the installed KairosConfig CRD and evaluates it against the
// version-skew policy.
func (r *Reconciler) loadBootstrapProvider(ctx context.Context) (*bootstrapProvider, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(crdGVK)
	if err := r.Client.Get(ctx, client.ObjectKey{Name: kairosConfigCRDName}, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return &bootstrapProvider{problem: fmt.Sprintf("the KairosConfig CRD %s is not installed: install the Kairos bootstrap provider (clusterctl init --bootstrap kairos)", kairosConfigCRDName)}, nil
		}
		return nil, fmt.Errorf("reading the KairosConfig CRD: %w", err)
	}
	crd, err := r.bootstrapCRD.get(ctx, r.APIReader, meta.ResourceVersion)
	if err != nil {
		return nil, err
	}
	return evaluateBootstrapProvider(crd, r.Version), nil
}

// crdGVK is the kind of CRDs; the control plane reads them unstructured and keeps no typed
// client for them.
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

func (c *bootstrapProviderCache) get(ctx context.Context, reader client.Reader, resourceVersion string) (*kairosConfigCRD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crd != nil && c.resourceVersion == resourceVersion {
		return c.crd, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(crdGVK)
	if err := reader.Get(ctx, client.ObjectKey{Name: kairosConfigCRDName}, u); err != nil {
		return nil, fmt.Errorf("reading the KairosConfig CRD: %w", err)
	}
	crd := &kairosConfigCRD{labels: u.GetLabels(), annotations: u.GetAnnotations()}
	versions, _, err := unstructured.NestedSlice(u.Object, "spec", "versions")
	if err != nil {
		return nil, fmt.Errorf("reading the versions of the KairosConfig CRD: %w", err)
	}
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		served, _ := m["served"].(bool)
		storage, _ := m["storage"].(bool)
		crd.versions = append(crd.versions, crdVersion{name: name, served: served, storage: storage})
	}
	// The metadata came from the cache, the spec from the API server: remember the cached
	// resourceVersion, so that a cache behind the API server does not cause a read every time.
	c.crd, c.resourceVersion = crd, resourceVersion
	return crd, nil
}

// evaluateBootstrapProvider applies the version-skew policy to the installed KairosConfig CRD;
// controlPlaneRelease is this control plane's release ("" or "dev" when built from a tree).
func evaluateBootstrapProvider(crd *kairosConfigCRD, controlPlaneRelease string) *bootstrapProvider {
	b := &bootstrapProvider{release: crd.annotations[bootstrapv1.ReleaseAnnotation]}
	for _, v := range crd.versions {
		if v.served {
			b.served = append(b.served, v.name)
		}
		if v.storage {
			b.storage = v.name
		}
	}
	label := clusterv1.GroupVersion.Group + "/" + contractVersion
	if l := crd.labels[label]; l != "" {
		b.contractVersions = strings.Split(l, "_")
	}
	if len(b.contractVersions) == 0 {
		b.problem = fmt.Sprintf("the installed KairosConfig CRD has no %s label: its bootstrap provider does not implement Cluster API contract %s; install a Kairos bootstrap provider release for contract %s",
			label, contractVersion, contractVersion)
		return b
	}
	for _, v := range writableConfigVersions {
		if slices.Contains(b.contractVersions, v) && slices.Contains(b.served, v) {
			b.apiVersion = schema.GroupVersion{Group: bootstrapv1.GroupVersion.Group, Version: v}.String()
			break
		}
	}
	if b.apiVersion == "" {
		b.problem = fmt.Sprintf("the installed KairosConfig CRD serves %s for contract %s (%s), and this control plane writes only %s: upgrade the control-plane provider",
			strings.Join(b.served, ","), contractVersion, strings.Join(b.contractVersions, ","), strings.Join(writableConfigVersions, ","))
		return b
	}
	b.problem = releaseSkewProblem(controlPlaneRelease, b.release)
	return b
}

// unannotatedBootstrapRelease is the release a KairosConfig CRD without the release annotation
// is taken for: the releases before the policy existed did not stamp their CRDs, and v0.1.0 is
// the newest of them (release/releases.yaml), so an unannotated CRD is at best v0.1.0.
const unannotatedBootstrapRelease = "v0.1.0"

// releaseSkewProblem says why a bootstrap release is outside the policy for a control-plane
// release, or "" when it is inside. Builds that are no release are exempt, and then only the
// contract is checked: a control plane built from a source tree ("" or "dev") or stamped with
// a pre-release (goreleaser snapshots are vX.Y.Z-dev+<commit>, release candidates
// vX.Y.Z-rc.N), and a bootstrap provider stamped with a pre-release. A bootstrap CRD with no
// stamp at all is unannotatedBootstrapRelease.
func releaseSkewProblem(controlPlaneRelease, bootstrapRelease string) string {
	cp, err := version.ParseSemantic(controlPlaneRelease)
	if err != nil || cp.PreRelease() != "" {
		return ""
	}
	named := bootstrapRelease
	if bootstrapRelease == "" {
		named = fmt.Sprintf("%s (its KairosConfig CRD names no release: a release before %s)", unannotatedBootstrapRelease, bootstrapv1.ReleaseAnnotation)
		bootstrapRelease = unannotatedBootstrapRelease
	}
	bs, err := version.ParseSemantic(bootstrapRelease)
	if err != nil {
		return fmt.Sprintf("the installed KairosConfig CRD names the release %q, which is not a version: install a Kairos bootstrap provider release", bootstrapRelease)
	}
	if bs.PreRelease() != "" {
		return ""
	}
	diff := int(bs.Minor()) - int(cp.Minor())
	if bs.Major() == cp.Major() && diff >= -bootstrapMinorSkew && diff <= bootstrapMinorSkew {
		return ""
	}
	lowest := max(int(cp.Minor())-bootstrapMinorSkew, 0)
	upgrade := "the bootstrap provider"
	if bs.Major() > cp.Major() || bs.Major() == cp.Major() && diff > 0 {
		upgrade = "the control-plane provider"
	}
	return fmt.Sprintf("bootstrap provider %s is outside the version-skew policy of control-plane provider %s, which works with bootstrap v%d.%d.x to v%d.%d.x: upgrade %s (clusterctl upgrade apply), one minor release at a time",
		named, controlPlaneRelease, cp.Major(), lowest, cp.Major(), cp.Minor()+bootstrapMinorSkew, upgrade)
}

// errConfigRefused stops the creation of a Machine whose KairosConfig the API server refused; the
// scope's configRefused says why.
var errConfigRefused = errors.New("the KairosConfig of a new Machine was refused")

// configRefusal turns the API server's refusal of a KairosConfig (unknown field under strict
// field validation, schema validation, the bootstrap provider's admission webhook) into the
// message of the BootstrapProviderCompatible condition; other errors stay errors.
func configRefusal(err error, b *bootstrapProvider) (string, bool) {
	if !apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		return "", false
	}
	release := b.release
	if release == "" {
		release = "(unknown release)"
	}
	return fmt.Sprintf("the installed bootstrap provider %s refused the KairosConfig of a new Machine: %v; remove what it does not accept from spec.kairosConfigSpec (or the KairosConfigTemplate), or upgrade the bootstrap provider",
		release, err), true
}
