// Package dryrun builds the Kairos document of a KairosConfig spec with placeholder
// credentials, so that admission (of KairosConfigs, and of KairosControlPlanes embedding one)
// refuses specs the renderer would refuse later, when a Machine would wait forever for data.
package dryrun

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// placeholders are stand-in credentials for the admission-time dry render. They are generated
// once per process and never leave it.
var placeholders = sync.OnceValues(func() (*render.PKI, error) {
	var out render.PKI
	for _, target := range []*pki.KeyPair{&out.ClusterCA, &out.EtcdCA, &out.FrontProxyCA} {
		ca, err := pki.NewCA("admission-placeholder", time.Hour)
		if err != nil {
			return nil, err
		}
		*target = *ca
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		return nil, err
	}
	out.ServiceAccount = *sa
	return &out, nil
})

// Render builds the document of a defaulted spec with placeholder credentials and reports
// every problem the renderer finds, each at the spec field it comes from under fld: what a
// node would misread in an inline fragment, flags the provider manages or the role does not
// take, manifests that are not Kubernetes objects, a k0s config k0s would refuse, conflicts
// with what the provider generates. The same rules run again at render time, when the
// content of referenced Secrets is known: here files, manifests and fragments from Secrets get
// placeholder content.
func Render(spec *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	ph, err := placeholders()
	if err != nil {
		return field.ErrorList{field.InternalError(fld, fmt.Errorf("generating placeholder credentials: %w", err))}
	}
	spec = spec.DeepCopy()

	in := userdata.Inputs{
		ClusterName:       "admission",
		Namespace:         "admission",
		Endpoint:          render.Endpoint{Host: "192.0.2.1", Port: 6443},
		KubernetesVersion: spec.KubernetesVersion,
		Secrets:           map[userdata.Ref]string{},
	}
	if in.KubernetesVersion == "" {
		in.KubernetesVersion = "v1.31.0"
	}
	// A virtual IP is the endpoint host (the controller checks it against the Cluster's): the
	// placeholder endpoint takes it, so that only the address itself is judged here.
	if v := spec.VirtualIP; v != nil && net.ParseIP(v.Address) != nil {
		in.Endpoint.Host = v.Address
	}
	for _, ref := range userdata.References(spec) {
		in.Secrets[ref] = "placeholder"
	}
	for _, m := range spec.Manifests {
		if m.ContentFrom != nil {
			in.Secrets[userdata.RefOf(m.ContentFrom)] = placeholderManifest
		}
	}
	// Fragments from Secrets stay in place (as empty documents), so that the problems of the
	// inline ones are reported at their own index.
	for _, f := range spec.CloudConfigFragments {
		if f.ContentFrom != nil {
			in.Secrets[userdata.RefOf(f.ContentFrom)] = "#cloud-config\n"
		}
	}
	switch {
	case spec.Distribution == bootstrapv1.DistributionK3s && spec.Role == bootstrapv1.RoleControlPlane:
		if in.JoinToken, err = token.NewK3sToken(ph.ClusterCA.Cert); err != nil {
			return field.ErrorList{field.InternalError(fld, err)}
		}
		if in.AgentToken, err = token.NewK3sAgentToken(ph.ClusterCA.Cert); err != nil {
			return field.ErrorList{field.InternalError(fld, err)}
		}
	case spec.Distribution == bootstrapv1.DistributionK3s:
		if in.JoinToken, err = token.NewK3sAgentToken(ph.ClusterCA.Cert); err != nil {
			return field.ErrorList{field.InternalError(fld, err)}
		}
	case spec.Role == bootstrapv1.RoleWorker:
		if in.JoinToken, err = placeholderK0sToken(ph.ClusterCA.Cert); err != nil {
			return field.ErrorList{field.InternalError(fld, err)}
		}
	}
	if spec.Role == bootstrapv1.RoleControlPlane {
		in.PKI, in.Init = ph, true
	}
	if wt, ok := userdata.WorkerTokenOverride(spec, in.Secrets); ok && spec.WorkerToken != "" {
		in.JoinToken = wt // an inline override is checked like the token it replaces
	}
	_, err = userdata.Render(spec, in)
	var re *userdata.RenderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		errs := make(field.ErrorList, 0, len(re.Problems))
		for _, p := range re.Problems {
			msg := p.Message
			if p.Path != "" {
				msg = p.Path + ": " + msg
			}
			if p.Source != "" && !strings.HasPrefix(p.Source, "Secret") {
				msg = p.Source + ": " + msg
			}
			if p.Spec {
				errs = append(errs, field.Invalid(fld.Child(p.Field), field.OmitValueType{}, msg))
			} else {
				errs = append(errs, field.Invalid(fld, field.OmitValueType{}, "the Kairos document cannot be built from this spec: "+p.String()))
			}
		}
		return errs
	default:
		return field.ErrorList{field.Invalid(fld, field.OmitValueType{}, fmt.Sprintf("the Kairos document cannot be built from this spec: %v", err))}
	}
}

// placeholderManifest stands in for manifests read from Secrets, which admission cannot read.
const placeholderManifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: admission-placeholder\n"

func placeholderK0sToken(caCert []byte) (string, error) {
	t, err := token.NewBootstrapToken()
	if err != nil {
		return "", err
	}
	return token.NewK0sJoinToken(token.K0sWorkerToken, "https://192.0.2.1:6443", caCert, t)
}
