package clusterctlrepo

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// PointWebhooks points the webhooks of a provider's installed webhook configurations (selected
// by its clusterctl label) at a local server on port that presents a certificate of caBundle:
// what the webhook Service and cert-manager's CA injector do in a real cluster. Webhooks whose
// path keep rejects are dropped (nobody would answer them); keep nil keeps all. The provider's
// runtime-extension registrations (ExtensionConfigs with its label) are pointed at the same
// server, whose webhook server serves the runtime hooks.
func PointWebhooks(ctx context.Context, c client.Client, label string, port int, caBundle []byte, keep func(path string) bool) error {
	point := func(cc *admissionv1.WebhookClientConfig) (bool, error) {
		var path string
		switch {
		case cc.Service != nil && cc.Service.Path != nil:
			path = *cc.Service.Path
		case cc.URL != nil:
			u, err := url.Parse(*cc.URL)
			if err != nil {
				return false, err
			}
			path = u.Path
		}
		if keep != nil && !keep(path) {
			return false, nil
		}
		u := "https://127.0.0.1:" + strconv.Itoa(port) + path
		*cc = admissionv1.WebhookClientConfig{URL: &u, CABundle: caBundle}
		return true, nil
	}
	selector := client.MatchingLabels{clusterv1.ProviderNameLabel: label}
	n, err := RepointWebhookConfigurations(ctx, c, nil, point, selector)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no webhook configurations of %s installed", label)
	}
	return pointExtensionConfigs(ctx, c, selector, "https://127.0.0.1:"+strconv.Itoa(port), caBundle)
}

// RepointWebhookConfigurations rewrites, with point, the client configuration of every webhook
// of the mutating and validating webhook configurations listed with opts that match accepts
// (nil: all), dropping the webhooks point declines, and returns how many configurations it
// updated.
func RepointWebhookConfigurations(ctx context.Context, c client.Client, match func(client.Object) bool, point func(*admissionv1.WebhookClientConfig) (bool, error), opts ...client.ListOption) (int, error) {
	mutating := &admissionv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mutating, opts...); err != nil {
		return 0, err
	}
	validating := &admissionv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, validating, opts...); err != nil {
		return 0, err
	}
	n := 0
	for i := range mutating.Items {
		w := &mutating.Items[i]
		if match != nil && !match(w) {
			continue
		}
		var err error
		if w.Webhooks, err = pointHooks(w.Webhooks, func(h *admissionv1.MutatingWebhook) *admissionv1.WebhookClientConfig { return &h.ClientConfig }, point); err != nil {
			return n, err
		}
		if err := c.Update(ctx, w); err != nil {
			return n, err
		}
		n++
	}
	for i := range validating.Items {
		w := &validating.Items[i]
		if match != nil && !match(w) {
			continue
		}
		var err error
		if w.Webhooks, err = pointHooks(w.Webhooks, func(h *admissionv1.ValidatingWebhook) *admissionv1.WebhookClientConfig { return &h.ClientConfig }, point); err != nil {
			return n, err
		}
		if err := c.Update(ctx, w); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// extensionConfigListGVK is Cluster API's runtime-extension registration list, read unstructured
// so that callers need not know its types.
var extensionConfigListGVK = schema.GroupVersionKind{Group: "runtime.cluster.x-k8s.io", Version: "v1beta2", Kind: "ExtensionConfigList"}

// injectCAFromSecretAnnotation makes Cluster API copy a CA from a cert-manager Secret into an
// ExtensionConfig (api/runtime/v1beta2 InjectCAFromSecretAnnotation); the local server's CA is
// given directly instead.
const injectCAFromSecretAnnotation = "runtime.cluster.x-k8s.io/inject-ca-from-secret"

// pointExtensionConfigs points the selected ExtensionConfigs at url with caBundle, as the
// webhook Service and Cluster API's CA injection do in a real cluster. Nothing to do when the
// ExtensionConfig CRD is not installed.
func pointExtensionConfigs(ctx context.Context, c client.Client, selector client.MatchingLabels, url string, caBundle []byte) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(extensionConfigListGVK)
	if err := c.List(ctx, list, selector); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("listing ExtensionConfigs: %w", err)
	}
	for i := range list.Items {
		ec := &list.Items[i]
		if err := unstructured.SetNestedMap(ec.Object, map[string]any{
			"url": url, "caBundle": base64.StdEncoding.EncodeToString(caBundle),
		}, "spec", "clientConfig"); err != nil {
			return err
		}
		annotations := ec.GetAnnotations()
		delete(annotations, injectCAFromSecretAnnotation)
		ec.SetAnnotations(annotations)
		if err := c.Update(ctx, ec); err != nil {
			return fmt.Errorf("pointing ExtensionConfig %s at %s: %w", ec.GetName(), url, err)
		}
	}
	return nil
}

// pointHooks points every hook's client config with point and keeps the hooks it accepts.
func pointHooks[H any](hooks []H, config func(*H) *admissionv1.WebhookClientConfig, point func(*admissionv1.WebhookClientConfig) (bool, error)) ([]H, error) {
	kept := hooks[:0]
	for i := range hooks {
		ok, err := point(config(&hooks[i]))
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, hooks[i])
		}
	}
	return kept, nil
}
