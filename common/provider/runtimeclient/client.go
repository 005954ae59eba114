// Package runtimeclient is a Cluster API Runtime SDK client: it implements
// sigs.k8s.io/cluster-api/exp/runtime/client.Client, the interface Cluster API's reconcilers (and
// a provider's own, for in-place updates) call runtime extensions through.
//
// Why our own: Cluster API's only implementation lives in sigs.k8s.io/cluster-api/internal/runtime/client,
// which other modules cannot import, and a provider that runs Cluster API's reconcilers (the
// test harness) or decides on in-place updates (the control-plane manager) needs one. This one
// is written on Cluster API's public APIs only (api/runtime/v1beta2, api/runtime/hooks/v1alpha1,
// api/runtime/catalog) and follows the semantics of the internal client of cluster-api v1.14.2
// (internal/runtime/client/client.go, internal/runtime/registry/registry.go):
//
//   - handlers are registered as <handler>.<ExtensionConfig name>, from the ExtensionConfig's
//     status.handlers (what Discover wrote there);
//   - the client is not ready, and refuses every lookup, until WarmUp has been given the
//     ExtensionConfigs that exist (Cluster API's ExtensionConfig reconciler does that);
//   - an ExtensionConfig's namespaceSelector is matched against the labels of the namespace of
//     the object a hook is called for;
//   - calls are HTTPS POSTs to the ExtensionConfig's url (as given) or Service
//     (https://<name>.<namespace>.svc[:port][/path]), followed by the catalog's handler path,
//     with the ExtensionConfig's caBundle as the only trusted CA, the handler's timeout, and the
//     ExtensionConfig's settings merged under the request's;
//   - a transport failure (no answer, non-200, undecodable body) is ignored under failurePolicy
//     Ignore (the response becomes a plain Success) and an error under Fail; a response with
//     status Failure is always an error carrying the extension's message.
//
// Left out, because nothing here needs them: client certificates (mTLS to extensions), request
// metrics, and conversion between versions of a hook (cluster-api v1.14 has one version of each;
// a handler registered for another version than the caller's is refused, not converted).
package runtimeclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
)

const (
	// discoveryTimeout bounds a discovery call: it has no handler (and so no timeoutSeconds) yet.
	discoveryTimeout = 10 * time.Second
	// maxResponseBytes bounds what is read of an extension's answer, so that a broken or hostile
	// extension cannot make the manager buffer an unbounded body. Cluster API uses the same bound.
	maxResponseBytes = 20 << 20
)

// Options configure a Client.
type Options struct {
	// Namespaces reads the Namespace of the object a hook is called for, to match the
	// ExtensionConfigs' namespaceSelectors. Required. A manager's client (cached) is what
	// Cluster API uses; only the metadata of Namespaces is read.
	Namespaces client.Reader
	// Catalog knows the hooks. Default: one with Cluster API's hooks (api/runtime/hooks/v1alpha1).
	Catalog *runtimecatalog.Catalog
}

// Client is a Runtime SDK client. Create it with New.
type Client struct {
	catalog    *runtimecatalog.Catalog
	namespaces client.Reader

	mu       sync.RWMutex
	ready    bool
	handlers map[string]*registration
	// httpClients are kept per server name and CA: each has its connection pool, which the
	// frequent hook calls of a reconcile reuse.
	httpClients map[string]*http.Client
}

var _ runtimeclient.Client = &Client{}

// registration is one handler of a registered ExtensionConfig.
type registration struct {
	name, extensionConfig string
	// resourceVersion of the ExtensionConfig, part of the cache keys of CallExtension's
	// WithCaching option: a changed ExtensionConfig invalidates cached answers.
	resourceVersion string
	gvh             runtimecatalog.GroupVersionHook
	selector        labels.Selector
	clientConfig    runtimev1.ClientConfig
	timeout         time.Duration
	failurePolicy   runtimev1.FailurePolicy
	settings        map[string]string
}

// New returns a Client that is not ready until WarmUp.
func New(o Options) (*Client, error) {
	if o.Namespaces == nil {
		return nil, errors.New("runtime client: Options.Namespaces is required")
	}
	if o.Catalog == nil {
		o.Catalog = runtimecatalog.New()
		if err := runtimehooksv1.AddToCatalog(o.Catalog); err != nil {
			return nil, fmt.Errorf("runtime client: building the hook catalog: %w", err)
		}
	}
	return &Client{catalog: o.Catalog, namespaces: o.Namespaces, handlers: map[string]*registration{}, httpClients: map[string]*http.Client{}}, nil
}

// WarmUp registers the ExtensionConfigs that exist when the manager starts, and makes the client
// ready. Until then every lookup fails rather than answering "no extension", so that a
// reconciler never takes the absence of a not-yet-registered extension for a decision.
func (c *Client) WarmUp(list *runtimev1.ExtensionConfigList) error {
	if list == nil {
		return errors.New("warming up the runtime client: no ExtensionConfig list")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready {
		return errors.New("warming up the runtime client: already warmed up")
	}
	all := map[string]*registration{}
	for i := range list.Items {
		regs, err := registrationsOf(&list.Items[i])
		if err != nil {
			return fmt.Errorf("warming up the runtime client: %w", err)
		}
		for _, r := range regs {
			all[r.name] = r
		}
	}
	c.handlers, c.ready = all, true
	return nil
}

// IsReady tells whether WarmUp has completed.
func (c *Client) IsReady() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ready
}

// Register replaces the handlers of an ExtensionConfig with those of its status.
func (c *Client) Register(ec *runtimev1.ExtensionConfig) error {
	if ec == nil {
		return errors.New("registering an ExtensionConfig: nil")
	}
	regs, err := registrationsOf(ec)
	if err != nil {
		return fmt.Errorf("registering ExtensionConfig %s: %w", ec.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return fmt.Errorf("registering ExtensionConfig %s: the runtime client is not warmed up", ec.Name)
	}
	c.remove(ec.Name)
	for _, r := range regs {
		c.handlers[r.name] = r
	}
	return nil
}

// Unregister removes the handlers of an ExtensionConfig.
func (c *Client) Unregister(ec *runtimev1.ExtensionConfig) error {
	if ec == nil {
		return errors.New("unregistering an ExtensionConfig: nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return fmt.Errorf("unregistering ExtensionConfig %s: the runtime client is not warmed up", ec.Name)
	}
	c.remove(ec.Name)
	return nil
}

func (c *Client) remove(extensionConfig string) {
	for name, r := range c.handlers {
		if r.extensionConfig == extensionConfig {
			delete(c.handlers, name)
		}
	}
}

// registrationsOf reads the handlers of an ExtensionConfig's status: all of them or, on an
// error, none (a half-registered extension would be called for some hooks and not others).
func registrationsOf(ec *runtimev1.ExtensionConfig) ([]*registration, error) {
	// No selector is the documented default, the empty one that matches every namespace (Cluster
	// API's admission webhook writes it; the conversion below would make nil match nothing).
	ls := ec.Spec.NamespaceSelector
	if ls == nil {
		ls = &metav1.LabelSelector{}
	}
	selector, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, fmt.Errorf("ExtensionConfig %s namespaceSelector: %w", ec.Name, err)
	}
	regs := make([]*registration, 0, len(ec.Status.Handlers))
	for _, h := range ec.Status.Handlers {
		gv, err := schema.ParseGroupVersion(h.RequestHook.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("ExtensionConfig %s handler %s apiVersion: %w", ec.Name, h.Name, err)
		}
		regs = append(regs, &registration{
			name: h.Name, extensionConfig: ec.Name, resourceVersion: ec.ResourceVersion,
			gvh:      runtimecatalog.GroupVersionHook{Group: gv.Group, Version: gv.Version, Hook: h.RequestHook.Hook},
			selector: selector, clientConfig: ec.Spec.ClientConfig,
			timeout:       time.Duration(h.TimeoutSeconds) * time.Second,
			failurePolicy: h.FailurePolicy, settings: ec.Spec.Settings,
		})
	}
	return regs, nil
}

// Discover asks the extension of an ExtensionConfig for its handlers, and returns a copy of the
// ExtensionConfig whose status lists them under their registered names.
func (c *Client) Discover(ctx context.Context, ec *runtimev1.ExtensionConfig) (*runtimev1.ExtensionConfig, error) {
	ctrl.LoggerFrom(ctx).V(4).Info("Discovering the handlers of an ExtensionConfig", "extensionConfig", ec.Name)
	gvh, err := c.catalog.GroupVersionHook(runtimehooksv1.Discovery)
	if err != nil {
		return nil, fmt.Errorf("discovering extension %s: %w", ec.Name, err)
	}
	resp := &runtimehooksv1.DiscoveryResponse{}
	if err := c.post(ctx, ec.Spec.ClientConfig, gvh, "", discoveryTimeout, &runtimehooksv1.DiscoveryRequest{}, resp); err != nil {
		return nil, fmt.Errorf("discovering extension %s: %w", ec.Name, err)
	}
	if err := statusError(resp); err != nil {
		return nil, fmt.Errorf("discovering extension %s: %w", ec.Name, err)
	}
	if err := c.defaultAndValidate(resp); err != nil {
		return nil, fmt.Errorf("discovering extension %s: %w", ec.Name, err)
	}
	out := ec.DeepCopy()
	out.Status.Handlers = []runtimev1.ExtensionHandler{}
	for _, h := range resp.Handlers {
		out.Status.Handlers = append(out.Status.Handlers, runtimev1.ExtensionHandler{
			Name:           HandlerName(h.Name, ec.Name),
			RequestHook:    runtimev1.GroupVersionHook{APIVersion: h.RequestHook.APIVersion, Hook: h.RequestHook.Hook},
			TimeoutSeconds: *h.TimeoutSeconds,
			FailurePolicy:  runtimev1.FailurePolicy(*h.FailurePolicy),
		})
	}
	return out, nil
}

// HandlerName is the name a handler is registered, and called, under.
func HandlerName(handler, extensionConfig string) string { return handler + "." + extensionConfig }

// defaultAndValidate applies the runtime SDK's defaults to a discovery answer (failurePolicy
// Fail, timeout 10 s) and refuses the answer when a handler is unusable: one bad handler makes
// the whole extension fail discovery, as in Cluster API, instead of registering part of it.
func (c *Client) defaultAndValidate(resp *runtimehooksv1.DiscoveryResponse) error {
	var errs []error
	seen := map[string]bool{}
	for i := range resp.Handlers {
		h := &resp.Handlers[i]
		if h.FailurePolicy == nil {
			h.FailurePolicy = ptr.To(runtimehooksv1.FailurePolicyFail)
		}
		if h.TimeoutSeconds == nil {
			h.TimeoutSeconds = ptr.To[int32](runtimehooksv1.DefaultHandlersTimeoutSeconds)
		}
		if seen[h.Name] {
			errs = append(errs, fmt.Errorf("handler name %s is duplicated", h.Name))
		}
		seen[h.Name] = true
		if msgs := validation.IsDNS1123Label(h.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("handler name %s is invalid: %s", h.Name, strings.Join(msgs, ", ")))
		}
		if t := *h.TimeoutSeconds; t < 0 || t > 30 {
			errs = append(errs, fmt.Errorf("handler %s timeoutSeconds %d is not between 0 and 30", h.Name, t))
		}
		if p := *h.FailurePolicy; p != runtimehooksv1.FailurePolicyFail && p != runtimehooksv1.FailurePolicyIgnore {
			errs = append(errs, fmt.Errorf("handler %s failurePolicy %q is neither Fail nor Ignore", h.Name, p))
		}
		gv, err := schema.ParseGroupVersion(h.RequestHook.APIVersion)
		if err != nil {
			errs = append(errs, fmt.Errorf("handler %s requestHook apiVersion: %w", h.Name, err))
		} else if !c.catalog.IsHookRegistered(runtimecatalog.GroupVersionHook{Group: gv.Group, Version: gv.Version, Hook: h.RequestHook.Hook}) {
			errs = append(errs, fmt.Errorf("handler %s requestHook %s/%s is not in the catalog", h.Name, h.RequestHook.APIVersion, h.RequestHook.Hook))
		}
	}
	return errors.Join(errs...)
}

// GetAllExtensions returns the names of the handlers of hook that apply to forObject (whose
// ExtensionConfig's namespaceSelector matches the object's namespace).
func (c *Client) GetAllExtensions(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object) ([]string, error) {
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return nil, fmt.Errorf("listing the extensions of hook %s: %w", runtimecatalog.HookName(hook), err)
	}
	c.mu.RLock()
	ready := c.ready
	var regs []*registration
	for _, r := range c.handlers {
		if r.gvh.GroupHook() == gvh.GroupHook() {
			regs = append(regs, r)
		}
	}
	c.mu.RUnlock()
	if !ready {
		return nil, fmt.Errorf("listing the extensions of hook %s: the runtime client is not warmed up", gvh.Hook)
	}
	names := []string{}
	for _, r := range regs {
		ok, err := c.matchNamespace(ctx, r.selector, forObject.GetNamespace())
		if err != nil {
			return nil, fmt.Errorf("listing the extensions of hook %s: handler %s: %w", gvh.Hook, r.name, err)
		}
		if ok {
			names = append(names, r.name)
		}
	}
	return names, nil
}

func (c *Client) matchNamespace(ctx context.Context, selector labels.Selector, namespace string) (bool, error) {
	if selector.Empty() {
		return true, nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err := c.namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false, fmt.Errorf("reading namespace %q for the namespaceSelector: %w", namespace, err)
	}
	return selector.Matches(labels.Set(ns.GetLabels())), nil
}

// CallAllExtensions calls every handler of hook that applies to forObject, one after the other,
// and stops at the first error, so that one unreachable extension costs one timeout, not one per
// handler. response then aggregates the answers: Success, the messages joined, and, for hooks
// that can ask to be retried, the lowest non-zero retryAfterSeconds (the soonest any extension
// wants to be asked again).
func (c *Client) CallAllExtensions(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object, request runtimehooksv1.RequestObject, response runtimehooksv1.ResponseObject) error {
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return fmt.Errorf("calling the extensions of hook %s: %w", runtimecatalog.HookName(hook), err)
	}
	if err := c.validateTypes(gvh, request, response); err != nil {
		return fmt.Errorf("calling the extensions of hook %s: %w", gvh.Hook, err)
	}
	names, err := c.GetAllExtensions(ctx, hook, forObject)
	if err != nil {
		return err
	}
	var messages []string
	var retryAfter int32
	for _, name := range names {
		obj, err := c.catalog.NewResponse(gvh)
		if err != nil {
			return fmt.Errorf("calling the extensions of hook %s: %w", gvh.Hook, err)
		}
		resp := obj.(runtimehooksv1.ResponseObject)
		if err := c.CallExtension(ctx, hook, forObject, name, request, resp); err != nil {
			return fmt.Errorf("calling the extensions of hook %s: %w", gvh.Hook, err)
		}
		if m := resp.GetMessage(); m != "" {
			messages = append(messages, m)
		}
		if r, ok := resp.(runtimehooksv1.RetryResponseObject); ok {
			retryAfter = lowestNonZero(retryAfter, r.GetRetryAfterSeconds())
		}
	}
	response.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	response.SetMessage(strings.Join(messages, ", "))
	if r, ok := response.(runtimehooksv1.RetryResponseObject); ok {
		r.SetRetryAfterSeconds(retryAfter)
	}
	return nil
}

func lowestNonZero(a, b int32) int32 {
	switch {
	case a == 0:
		return b
	case b == 0 || a < b:
		return a
	default:
		return b
	}
}

func (c *Client) validateTypes(gvh runtimecatalog.GroupVersionHook, request runtimehooksv1.RequestObject, response runtimehooksv1.ResponseObject) error {
	if err := c.catalog.ValidateRequest(gvh, request); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if err := c.catalog.ValidateResponse(gvh, response); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// CallExtension calls the handler registered as name, for forObject, and fills response with
// its answer. The error cases are described in the package documentation. With the WithCaching
// option, a cached answer for the same handler, ExtensionConfig version and request (as the
// option's key function computes it) is returned without a call, and a successful answer is
// cached.
func (c *Client) CallExtension(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object, name string, request runtimehooksv1.RequestObject, response runtimehooksv1.ResponseObject, opts ...runtimeclient.CallExtensionOption) error {
	options := &runtimeclient.CallExtensionOptions{}
	for _, o := range opts {
		o.ApplyToOptions(options)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("extensionHandler", name, "hook", runtimecatalog.HookName(hook))
	ctx = ctrl.LoggerInto(ctx, log)
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return fmt.Errorf("calling extension handler %s: %w", name, err)
	}
	if err := c.validateTypes(gvh, request, response); err != nil {
		return fmt.Errorf("calling extension handler %s: %w", name, err)
	}
	c.mu.RLock()
	ready, r := c.ready, c.handlers[name]
	c.mu.RUnlock()
	switch {
	case !ready:
		return fmt.Errorf("calling extension handler %s: the runtime client is not warmed up", name)
	case r == nil:
		return fmt.Errorf("calling extension handler %s: no such handler is registered", name)
	case r.gvh.GroupHook() != gvh.GroupHook():
		return fmt.Errorf("calling extension handler %s: it handles %s, not %s", name, r.gvh.GroupHook(), gvh.GroupHook())
	case r.gvh.Version != gvh.Version:
		// The internal client converts between hook versions through the catalog; cluster-api
		// v1.14 has a single version of every hook, so there is nothing to convert yet.
		return fmt.Errorf("calling extension handler %s: it serves %s, the caller speaks %s, and this client does not convert between hook versions", name, r.gvh, gvh)
	}
	ok, err := c.matchNamespace(ctx, r.selector, forObject.GetNamespace())
	if err != nil {
		return fmt.Errorf("calling extension handler %s: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("calling extension handler %s: its namespaceSelector does not match %s/%s", name, forObject.GetNamespace(), forObject.GetName())
	}

	request = withSettings(request, r.settings)
	var cacheKey string
	if options.WithCaching {
		cacheKey = options.CacheKeyFunc(r.name, r.resourceVersion, request)
		if entry, ok := options.Cache.Has(cacheKey); ok {
			out, cached := reflect.ValueOf(response), reflect.ValueOf(entry.Response)
			if cached.Type() != out.Type() {
				return fmt.Errorf("calling extension handler %s: the cached response is a %s, not a %s", name, cached.Type(), out.Type())
			}
			out.Elem().Set(cached.Elem())
			return nil
		}
	}

	timeout := r.timeout
	if timeout == 0 {
		timeout = runtimehooksv1.DefaultHandlersTimeoutSeconds * time.Second
	}
	log.V(4).Info("Calling extension handler")
	short := strings.TrimSuffix(r.name, "."+r.extensionConfig)
	if err := c.post(ctx, r.clientConfig, r.gvh, short, timeout, request, response); err != nil {
		var te *transportError
		if errors.As(err, &te) && r.failurePolicy == runtimev1.FailurePolicyIgnore {
			// The extension said it may be skipped when unreachable: answer as if it agreed.
			log.Error(err, "Ignoring the failed call of an extension handler (failurePolicy Ignore)")
			response.SetStatus(runtimehooksv1.ResponseStatusSuccess)
			response.SetMessage("")
			return nil
		}
		return fmt.Errorf("calling extension handler %s: %w", name, err)
	}
	if err := statusError(response); err != nil {
		return fmt.Errorf("calling extension handler %s: %w", name, err)
	}
	if options.WithCaching {
		options.Cache.Add(runtimeclient.CallExtensionCacheEntry{CacheKey: cacheKey, Response: response})
	}
	return nil
}

// withSettings returns a copy of request whose settings are the ExtensionConfig's, overridden by
// the request's own. A copy, because the caller may call several extensions with one request.
func withSettings(request runtimehooksv1.RequestObject, settings map[string]string) runtimehooksv1.RequestObject {
	request = request.DeepCopyObject().(runtimehooksv1.RequestObject)
	merged := map[string]string{}
	for k, v := range settings {
		merged[k] = v
	}
	for k, v := range request.GetSettings() {
		merged[k] = v
	}
	request.SetSettings(merged)
	return request
}

func statusError(response runtimehooksv1.ResponseObject) error {
	switch response.GetStatus() {
	case runtimehooksv1.ResponseStatusSuccess:
		return nil
	case runtimehooksv1.ResponseStatusFailure:
		return fmt.Errorf("the extension answered Failure: %s", response.GetMessage())
	default:
		return fmt.Errorf("the extension answered the unknown status %q: %s", response.GetStatus(), response.GetMessage())
	}
}

// transportError is a call that got no usable answer: the one kind of error failurePolicy
// Ignore forgives. Invalid requests and Failure answers are errors whatever the policy.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// post sends request to the handler short (empty for discovery) of the extension at cfg and
// decodes the answer into response.
func (c *Client) post(ctx context.Context, cfg runtimev1.ClientConfig, gvh runtimecatalog.GroupVersionHook, short string, timeout time.Duration, request, response runtime.Object) error {
	u, err := extensionURL(cfg, gvh, short)
	if err != nil {
		return err
	}
	httpClient, err := c.httpClient(u.Hostname(), cfg.CABundle)
	if err != nil {
		return err
	}
	gvk, err := c.catalog.Request(gvh)
	if err != nil {
		return err
	}
	request.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}

	// The timeout travels to the extension too (as the internal client sends it), which may use
	// it to bound its own work.
	q := u.Query()
	q.Set("timeout", timeout.String())
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpResp, err := httpClient.Do(httpReq)
	if err != nil {
		return &transportError{fmt.Errorf("POST %s: %w", u.Redacted(), err)}
	}
	defer httpResp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(httpResp.Body, maxResponseBytes))
	if err != nil {
		return &transportError{fmt.Errorf("POST %s: reading the answer: %w", u.Redacted(), err)}
	}
	if httpResp.StatusCode != http.StatusOK {
		if len(data) > 512 {
			data = append(data[:512], "..."...)
		}
		return &transportError{fmt.Errorf("POST %s: status %d: %q", u.Redacted(), httpResp.StatusCode, data)}
	}
	if err := json.Unmarshal(data, response); err != nil {
		return &transportError{fmt.Errorf("POST %s: decoding the answer: %w", u.Redacted(), err)}
	}
	return nil
}

// extensionURL is where a handler is served: the ExtensionConfig's url as given, or its
// Service's in-cluster name, followed by the catalog's path of the handler
// (/<group>/<version>/<hook>[/<handler>], lowercase: what exp/runtime/server serves).
func extensionURL(cfg runtimev1.ClientConfig, gvh runtimecatalog.GroupVersionHook, short string) (*url.URL, error) {
	var u *url.URL
	if svc := cfg.Service; svc.IsDefined() {
		host := svc.Name + "." + svc.Namespace + ".svc"
		if svc.Port != nil {
			host = net.JoinHostPort(host, strconv.Itoa(int(*svc.Port)))
		}
		u = &url.URL{Scheme: "https", Host: host, Path: svc.Path}
	} else {
		if cfg.URL == "" {
			return nil, errors.New("the ExtensionConfig has neither url nor service")
		}
		var err error
		if u, err = url.Parse(cfg.URL); err != nil {
			return nil, fmt.Errorf("the ExtensionConfig's url: %w", err)
		}
		if u.Scheme != "https" {
			return nil, fmt.Errorf("the ExtensionConfig's url has scheme %q: only https is allowed", u.Scheme)
		}
	}
	u.Path = path.Join(u.Path, runtimecatalog.GVHToPath(gvh, short))
	return u, nil
}

// httpClient returns the client for a server name and CA bundle. It trusts only caBundle when
// one is given (the system roots otherwise), and follows no redirect: an extension must answer
// where it is registered, not send the manager's request, verified for one server name,
// somewhere else.
func (c *Client) httpClient(serverName string, caBundle []byte) (*http.Client, error) {
	key := serverName + "\x00" + string(caBundle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc := c.httpClients[key]; hc != nil {
		return hc, nil
	}
	tlsConfig := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("the ExtensionConfig's caBundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConfig
	hc := &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.httpClients[key] = hc
	return hc, nil
}
