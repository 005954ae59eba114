// Package dryrun builds the Kairos document of a KairosConfig spec with placeholder
// credentials, so that admission (of KairosConfigs, and of KairosControlPlanes embedding one)
// refuses specs the renderer would refuse later, when a Machine would wait forever for data.
package dryrun

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/userdata"
	"github.com/kairos-capi/kairos-capi/common/pki"
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

// Render builds the document of a defaulted spec with placeholder credentials and reports, at
// fld, conflicts between the user's input and what the provider generates (a file path or key
// set twice, a k0s config that contradicts the generated one). Content read from Secrets is
// not known here: files and manifests get placeholder content, and fragments from Secrets are
// checked at render time.
func Render(spec *bootstrapv1.KairosConfigSpec, fld *field.Path) field.ErrorList {
	ph, err := placeholders()
	if err != nil {
		return field.ErrorList{field.InternalError(fld, fmt.Errorf("generating placeholder credentials: %w", err))}
	}
	spec = spec.DeepCopy()
	fragments := spec.CloudConfigFragments[:0]
	for _, f := range spec.CloudConfigFragments {
		if f.ContentFrom == nil {
			fragments = append(fragments, f)
		}
	}
	spec.CloudConfigFragments = fragments

	in := userdata.Inputs{
		ClusterName:       "admission",
		Endpoint:          render.Endpoint{Host: "192.0.2.1", Port: 6443},
		KubernetesVersion: spec.KubernetesVersion,
		Secrets:           map[userdata.Ref]string{},
	}
	if in.KubernetesVersion == "" {
		in.KubernetesVersion = "v1.31.0"
	}
	for _, ref := range userdata.References(spec) {
		in.Secrets[ref] = "placeholder"
	}
	switch {
	case spec.Distribution == bootstrapv1.DistributionK3s:
		if in.JoinToken, err = token.NewK3sToken(ph.ClusterCA.Cert); err != nil {
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
	if _, err := userdata.Render(spec, in); err != nil {
		return field.ErrorList{field.Invalid(fld, field.OmitValueType{}, fmt.Sprintf("the Kairos document cannot be built from this spec: %v", err))}
	}
	return nil
}

func placeholderK0sToken(caCert []byte) (string, error) {
	t, err := token.NewBootstrapToken()
	if err != nil {
		return "", err
	}
	return token.NewK0sJoinToken(token.K0sWorkerToken, "https://192.0.2.1:6443", caCert, t)
}
