// Package preview renders a KairosConfig offline through the provider's own admission webhook
// and reconciler, so that what it shows is what a node would receive.
package preview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	sigsyaml "sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	crdfiles "github.com/kairos-capi/kairos-capi/bootstrap/config/crd"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/reconcilers/kairosconfig"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/webhooks"
	"github.com/kairos-capi/kairos-capi/common/provider/clustersecret"
)

// DefaultEndpoint is the control-plane endpoint used when the input has no Cluster
// (192.0.2.0/24 is reserved for documentation).
var DefaultEndpoint = clusterv1.APIEndpoint{Host: "192.0.2.10", Port: 6443}

// Options tune a preview.
type Options struct {
	// KubernetesVersion stands in for the owning Machine's spec.version.
	KubernetesVersion string
}

// Result is a rendered preview.
type Result struct {
	// Data is the bootstrap Secret's value.
	Data []byte
	// Warnings are the admission warnings of the KairosConfig.
	Warnings []string
}

// Render reads a multi-document YAML stream and renders its KairosConfig.
func Render(ctx context.Context, in *bufio.Reader, opts Options) (*Result, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	config, cluster, secrets, err := decode(scheme, in)
	if err != nil {
		return nil, err
	}
	// The API server applies the CRD's schema (lengths, list sizes, enumerations) before the
	// webhook sees the object; the preview must refuse what the API server refuses.
	if err := validateAgainstCRD(config); err != nil {
		return &Result{}, err
	}

	// Admission, exactly as the API server would run it.
	wh := &webhooks.KairosConfig{}
	if err := wh.Default(ctx, config); err != nil {
		return nil, err
	}
	warnings, err := wh.ValidateCreate(ctx, config)
	res := &Result{Warnings: warnings}
	if err != nil {
		return res, err
	}

	version := opts.KubernetesVersion
	if version == "" {
		version = config.Spec.KubernetesVersion
	}
	if version == "" {
		return res, errors.New("spec.kubernetesVersion is empty and there is no Machine to take the version from offline: set spec.kubernetesVersion or pass -kubernetes-version")
	}
	if cluster == nil {
		cluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "preview", Namespace: config.Namespace}}
		if name := config.Labels[clusterv1.ClusterNameLabel]; name != "" {
			cluster.Name = name
		}
		cluster.Spec.ControlPlaneEndpoint = DefaultEndpoint
	}
	if !cluster.Spec.ControlPlaneEndpoint.IsValid() {
		return res, fmt.Errorf("cluster %s has no spec.controlPlaneEndpoint: set it to the address nodes reach the API server at", cluster.Name)
	}
	// Offline, the cluster is as ready as this node needs it to be.
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	if config.Spec.Role == bootstrapv1.RoleWorker {
		cluster.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	}

	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: config.Name, Namespace: config.Namespace, UID: "preview-machine",
			Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Spec: clusterv1.MachineSpec{
			ClusterName: cluster.Name,
			Version:     version,
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KairosConfig", Name: config.Name}},
		},
	}
	if config.Spec.Role == bootstrapv1.RoleControlPlane {
		machine.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	if config.Labels == nil {
		config.Labels = map[string]string{}
	}
	config.Labels[clusterv1.ClusterNameLabel] = cluster.Name
	config.UID = "preview-config"
	config.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID}}

	objs := []client.Object{config, cluster, machine}
	for _, s := range secrets {
		objs = append(objs, s)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&bootstrapv1.KairosConfig{}).Build()

	// Throwaway cluster credentials for whatever the input does not provide.
	owner := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster", Name: cluster.Name, UID: "preview-cluster"}
	pki, err := clustersecret.LookupOrGeneratePKI(ctx, c, client.ObjectKeyFromObject(cluster), owner)
	if err != nil {
		return res, err
	}
	if config.Spec.Distribution == bootstrapv1.DistributionK3s {
		if _, err := clustersecret.LookupOrGenerateK3sToken(ctx, c, client.ObjectKeyFromObject(cluster), pki.ClusterCA.Cert, owner); err != nil {
			return res, err
		}
	}

	r := kairosconfig.NewOffline(c)
	key := client.ObjectKeyFromObject(config)
	ctx = ctrl.LoggerInto(ctx, ctrl.Log.WithName("preview"))
	// The first pass only records the Paused condition; a few passes settle any wait.
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			return res, err
		}
	}
	if err := c.Get(ctx, key, config); err != nil {
		return res, err
	}
	if !ptr.Deref(config.Status.Initialization.DataSecretCreated, false) {
		if cond := conditions.Get(config, bootstrapv1.DataSecretAvailableCondition); cond != nil {
			return res, fmt.Errorf("no bootstrap data: %s: %s", cond.Reason, cond.Message)
		}
		if conditions.IsTrue(config, clusterv1.PausedCondition) {
			return res, errors.New("no bootstrap data: reconciliation is paused (cluster.x-k8s.io/paused annotation or Cluster spec.paused)")
		}
		return res, errors.New("no bootstrap data was rendered")
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: config.Namespace, Name: config.Status.DataSecretName}, secret); err != nil {
		return res, err
	}
	res.Data = secret.Data["value"]
	return res, nil
}

var crdValidator = sync.OnceValues(func() (validation.SchemaValidator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := sigsyaml.UnmarshalStrict(crdfiles.KairosConfig, crd); err != nil {
		return nil, fmt.Errorf("reading the embedded KairosConfig CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != bootstrapv1.GroupVersion.Version || v.Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("converting the KairosConfig schema: %w", err)
		}
		validator, _, err := validation.NewSchemaValidator(internal)
		return validator, err
	}
	return nil, fmt.Errorf("the embedded KairosConfig CRD has no %s schema", bootstrapv1.GroupVersion.Version)
})

// validateAgainstCRD checks the KairosConfig against the CRD's OpenAPI schema, as the API
// server does on create.
func validateAgainstCRD(config *bootstrapv1.KairosConfig) error {
	validator, err := crdValidator()
	if err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(config)
	if err != nil {
		return err
	}
	u["apiVersion"], u["kind"] = bootstrapv1.GroupVersion.String(), "KairosConfig"
	if errs := validation.ValidateCustomResource(nil, u, validator); len(errs) > 0 {
		return apierrors.NewInvalid(bootstrapv1.GroupVersion.WithKind("KairosConfig").GroupKind(), config.Name, errs)
	}
	return nil
}

// decode reads the objects of the stream: exactly one KairosConfig, at most one Cluster, and
// any number of Secrets.
func decode(scheme *runtime.Scheme, in *bufio.Reader) (*bootstrapv1.KairosConfig, *clusterv1.Cluster, []*corev1.Secret, error) {
	deserializer := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	reader := utilyaml.NewYAMLReader(in)
	var (
		config  *bootstrapv1.KairosConfig
		cluster *clusterv1.Cluster
		secrets []*corev1.Secret
	)
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("reading document %d: %w", i, err)
		}
		if len(trimmed(doc)) == 0 {
			continue
		}
		obj, gvk, err := deserializer.Decode(doc, nil, nil)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		switch o := obj.(type) {
		case *bootstrapv1.KairosConfig:
			if config != nil {
				return nil, nil, nil, fmt.Errorf("document %d: a second KairosConfig; the input must hold exactly one", i)
			}
			config = o
		case *clusterv1.Cluster:
			if cluster != nil {
				return nil, nil, nil, fmt.Errorf("document %d: a second Cluster; the input may hold one", i)
			}
			cluster = o
		case *corev1.Secret:
			secrets = append(secrets, o)
		default:
			return nil, nil, nil, fmt.Errorf("document %d: %s is not supported: give a KairosConfig, its Cluster and Secrets", i, gvk.Kind)
		}
	}
	if config == nil {
		return nil, nil, nil, errors.New("the input holds no KairosConfig")
	}
	ns := config.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	config.Namespace = ns
	if cluster != nil {
		cluster.Namespace = ns
	}
	for _, s := range secrets {
		s.Namespace = ns
		for k, v := range s.StringData {
			if s.Data == nil {
				s.Data = map[string][]byte{}
			}
			s.Data[k] = []byte(v)
		}
	}
	return config, cluster, secrets, nil
}

func trimmed(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
