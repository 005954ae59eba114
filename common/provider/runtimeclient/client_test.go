package runtimeclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/util/cache"
)

const hooksPrefix = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/"

// extension is a runtime extension served by httptest: discovery announces handlers, and each
// hook path answers with what the test set.
type extension struct {
	srv      *httptest.Server
	handlers []runtimehooksv1.ExtensionHandler

	mu       sync.Mutex
	answers  map[string]func(w http.ResponseWriter, body []byte) // by path after hooksPrefix
	requests map[string][]byte
	queries  map[string]string
}

func newExtension(t *testing.T, handlers ...runtimehooksv1.ExtensionHandler) *extension {
	t.Helper()
	e := &extension{handlers: handlers, answers: map[string]func(http.ResponseWriter, []byte){}, requests: map[string][]byte{}, queries: map[string]string{}}
	e.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p := strings.TrimPrefix(r.URL.Path, hooksPrefix)
		if p == "discovery" {
			writeJSON(w, &runtimehooksv1.DiscoveryResponse{
				CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess},
				Handlers:       e.handlers,
			})
			return
		}
		e.mu.Lock()
		e.requests[p], e.queries[p] = body, r.URL.RawQuery
		answer := e.answers[p]
		e.mu.Unlock()
		if answer == nil {
			http.NotFound(w, r)
			return
		}
		answer(w, body)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *extension) answer(path string, f func(w http.ResponseWriter, body []byte)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.answers[path] = f
}

func (e *extension) request(path string) ([]byte, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests[path], e.queries[path]
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// config is an ExtensionConfig for e, trusting only e's certificate.
func (e *extension) config(name string, selector *metav1.LabelSelector) *runtimev1.ExtensionConfig {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: e.srv.Certificate().Raw})
	return &runtimev1.ExtensionConfig{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: runtimev1.ExtensionConfigSpec{
			ClientConfig:      runtimev1.ClientConfig{URL: e.srv.URL, CABundle: ca},
			NamespaceSelector: selector,
			Settings:          map[string]string{"from-config": "config", "both": "config"},
		},
	}
}

func handler(name string, hook runtimecatalog.Hook, timeout *int32, policy *runtimehooksv1.FailurePolicy) runtimehooksv1.ExtensionHandler {
	return runtimehooksv1.ExtensionHandler{
		Name:           name,
		RequestHook:    runtimehooksv1.GroupVersionHook{APIVersion: runtimehooksv1.GroupVersion.String(), Hook: runtimecatalog.HookName(hook)},
		TimeoutSeconds: timeout,
		FailurePolicy:  policy,
	}
}

var inPlaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"in-place": "true"}}

// newClient returns a client that can read the namespaces "in" (labelled in-place=true) and
// "out" (not).
func newClient(t *testing.T) *Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "in", Labels: map[string]string{"in-place": "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "out"}},
	).Build()
	c, err := New(Options{Namespaces: reader})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// discovered runs discovery of ec through c and registers it.
func discovered(t *testing.T, c *Client, ec *runtimev1.ExtensionConfig) *runtimev1.ExtensionConfig {
	t.Helper()
	out, err := c.Discover(context.Background(), ec)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if !c.IsReady() {
		if err := c.WarmUp(&runtimev1.ExtensionConfigList{Items: []runtimev1.ExtensionConfig{*out}}); err != nil {
			t.Fatalf("WarmUp: %v", err)
		}
	} else if err := c.Register(out); err != nil {
		t.Fatalf("Register: %v", err)
	}
	return out
}

func machineIn(ns string) *clusterv1.Machine {
	return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}}
}

func canUpdateAnswer(status runtimehooksv1.ResponseStatus, message string) func(http.ResponseWriter, []byte) {
	return func(w http.ResponseWriter, _ []byte) {
		writeJSON(w, &runtimehooksv1.CanUpdateMachineResponse{CommonResponse: runtimehooksv1.CommonResponse{Status: status, Message: message}})
	}
}

func TestDiscover(t *testing.T) {
	e := newExtension(t,
		handler("can-update", runtimehooksv1.CanUpdateMachine, ptr.To[int32](3), ptr.To(runtimehooksv1.FailurePolicyIgnore)),
		handler("update", runtimehooksv1.UpdateMachine, nil, nil))
	out := discovered(t, newClient(t), e.config("ext", nil))
	want := []runtimev1.ExtensionHandler{
		{Name: "can-update.ext", RequestHook: runtimev1.GroupVersionHook{APIVersion: "hooks.runtime.cluster.x-k8s.io/v1alpha1", Hook: "CanUpdateMachine"}, TimeoutSeconds: 3, FailurePolicy: runtimev1.FailurePolicyIgnore},
		// The runtime SDK's defaults.
		{Name: "update.ext", RequestHook: runtimev1.GroupVersionHook{APIVersion: "hooks.runtime.cluster.x-k8s.io/v1alpha1", Hook: "UpdateMachine"}, TimeoutSeconds: 10, FailurePolicy: runtimev1.FailurePolicyFail},
	}
	if len(out.Status.Handlers) != len(want) {
		t.Fatalf("handlers: %+v", out.Status.Handlers)
	}
	for i := range want {
		if out.Status.Handlers[i] != want[i] {
			t.Errorf("handler %d: got %+v, want %+v", i, out.Status.Handlers[i], want[i])
		}
	}
}

func TestDiscoverRefusesInvalidHandlersAndUntrustedServers(t *testing.T) {
	c := newClient(t)
	bad := newExtension(t, handler("Not_A_Label", runtimehooksv1.CanUpdateMachine, ptr.To[int32](31), nil))
	if _, err := c.Discover(context.Background(), bad.config("bad", nil)); err == nil ||
		!strings.Contains(err.Error(), "Not_A_Label is invalid") || !strings.Contains(err.Error(), "timeoutSeconds 31") {
		t.Errorf("invalid handlers: got %v", err)
	}
	e := newExtension(t, handler("x", runtimehooksv1.CanUpdateMachine, nil, nil))
	ec := e.config("ext", nil)
	ec.Spec.ClientConfig.CABundle = otherCA(t)
	if _, err := c.Discover(context.Background(), ec); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server the caBundle does not sign: got %v", err)
	}
}

// otherCA is a self-signed CA certificate that signed nothing.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestNotReadyBeforeWarmUp(t *testing.T) {
	c := newClient(t)
	e := newExtension(t, handler("x", runtimehooksv1.CanUpdateMachine, nil, nil))
	ec, err := c.Discover(context.Background(), e.config("ext", nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.IsReady() {
		t.Fatal("ready before WarmUp")
	}
	if _, err := c.GetAllExtensions(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("in")); err == nil {
		t.Error("GetAllExtensions before WarmUp: no error")
	}
	if err := c.CallExtension(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("in"), "x.ext",
		&runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{}); err == nil {
		t.Error("CallExtension before WarmUp: no error")
	}
	if err := c.Register(ec); err == nil {
		t.Error("Register before WarmUp: no error")
	}
	if err := c.WarmUp(&runtimev1.ExtensionConfigList{}); err != nil || !c.IsReady() {
		t.Fatalf("WarmUp: %v, ready %v", err, c.IsReady())
	}
	if err := c.WarmUp(&runtimev1.ExtensionConfigList{}); err == nil {
		t.Error("a second WarmUp: no error")
	}
}

func TestCallExtension(t *testing.T) {
	c := newClient(t)
	e := newExtension(t, handler("can-update", runtimehooksv1.CanUpdateMachine, ptr.To[int32](7), nil))
	discovered(t, c, e.config("ext", nil))
	e.answer("canupdatemachine/can-update", func(w http.ResponseWriter, _ []byte) {
		writeJSON(w, &runtimehooksv1.CanUpdateMachineResponse{
			CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess, Message: "in place"},
			MachinePatch:   runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: []byte(`[{"op":"replace","path":"/spec/version","value":"v1.36.3"}]`)},
		})
	})
	req := &runtimehooksv1.CanUpdateMachineRequest{CommonRequest: runtimehooksv1.CommonRequest{Settings: map[string]string{"both": "request"}}}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	if err := c.CallExtension(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("out"), "can-update.ext", req, resp); err != nil {
		t.Fatal(err)
	}
	if resp.Message != "in place" || string(resp.MachinePatch.Patch) != `[{"op":"replace","path":"/spec/version","value":"v1.36.3"}]` {
		t.Errorf("response: %+v", resp)
	}
	body, query := e.request("canupdatemachine/can-update")
	var sent runtimehooksv1.CanUpdateMachineRequest
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Kind != "CanUpdateMachineRequest" || sent.APIVersion != runtimehooksv1.GroupVersion.String() {
		t.Errorf("request type: %s %s", sent.APIVersion, sent.Kind)
	}
	// The request's own settings win over the ExtensionConfig's; the caller's request is untouched.
	if sent.Settings["from-config"] != "config" || sent.Settings["both"] != "request" || len(req.Settings) != 1 {
		t.Errorf("settings sent %v, caller's request now %v", sent.Settings, req.Settings)
	}
	if query != "timeout=7s" {
		t.Errorf("query %q, want the handler's timeout", query)
	}
	// A handler of another hook, or one nobody registered, is refused.
	if err := c.CallExtension(context.Background(), runtimehooksv1.UpdateMachine, machineIn("in"), "can-update.ext",
		&runtimehooksv1.UpdateMachineRequest{}, &runtimehooksv1.UpdateMachineResponse{}); err == nil {
		t.Error("calling a CanUpdateMachine handler for UpdateMachine: no error")
	}
	if err := c.CallExtension(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("in"), "nobody.ext", req, resp); err == nil {
		t.Error("calling an unknown handler: no error")
	}
}

func TestNamespaceSelector(t *testing.T) {
	c := newClient(t)
	e := newExtension(t, handler("can-update", runtimehooksv1.CanUpdateMachine, nil, nil))
	discovered(t, c, e.config("ext", inPlaceSelector))
	e.answer("canupdatemachine/can-update", canUpdateAnswer(runtimehooksv1.ResponseStatusSuccess, ""))
	ctx := context.Background()
	names, err := c.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, machineIn("in"))
	if err != nil || len(names) != 1 || names[0] != "can-update.ext" {
		t.Errorf("opted-in namespace: %v, %v", names, err)
	}
	names, err = c.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, machineIn("out"))
	if err != nil || len(names) != 0 {
		t.Errorf("other namespace: %v, %v", names, err)
	}
	if err := c.CallExtension(ctx, runtimehooksv1.CanUpdateMachine, machineIn("out"), "can-update.ext",
		&runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{}); err == nil || !strings.Contains(err.Error(), "namespaceSelector") {
		t.Errorf("calling for an object the selector does not match: %v", err)
	}
	if _, err := c.GetAllExtensions(ctx, runtimehooksv1.CanUpdateMachine, machineIn("missing")); err == nil {
		t.Error("a namespace that does not exist: no error")
	}
	// Other hooks have no handler.
	if names, err := c.GetAllExtensions(ctx, runtimehooksv1.UpdateMachine, machineIn("in")); err != nil || len(names) != 0 {
		t.Errorf("UpdateMachine: %v, %v", names, err)
	}
}

func TestFailurePoliciesAndFailureStatus(t *testing.T) {
	c := newClient(t)
	e := newExtension(t,
		handler("ignore", runtimehooksv1.CanUpdateMachine, nil, ptr.To(runtimehooksv1.FailurePolicyIgnore)),
		handler("fail", runtimehooksv1.CanUpdateMachine, nil, ptr.To(runtimehooksv1.FailurePolicyFail)))
	discovered(t, c, e.config("ext", nil))
	call := func(name string) (*runtimehooksv1.CanUpdateMachineResponse, error) {
		resp := &runtimehooksv1.CanUpdateMachineResponse{CommonResponse: runtimehooksv1.CommonResponse{Message: "stale"}}
		err := c.CallExtension(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("in"), name, &runtimehooksv1.CanUpdateMachineRequest{}, resp)
		return resp, err
	}
	// Transport errors (here: 500): forgiven under Ignore, errors under Fail.
	broken := func(w http.ResponseWriter, _ []byte) { http.Error(w, "boom", http.StatusInternalServerError) }
	e.answer("canupdatemachine/ignore", broken)
	e.answer("canupdatemachine/fail", broken)
	if resp, err := call("ignore.ext"); err != nil || resp.Status != runtimehooksv1.ResponseStatusSuccess || resp.Message != "" {
		t.Errorf("Ignore: %+v, %v", resp, err)
	}
	if _, err := call("fail.ext"); err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Errorf("Fail: %v", err)
	}
	// A Failure answer is an error whatever the policy, with the extension's message.
	e.answer("canupdatemachine/ignore", canUpdateAnswer(runtimehooksv1.ResponseStatusFailure, "cannot read the request"))
	if resp, err := call("ignore.ext"); err == nil || !strings.Contains(err.Error(), "cannot read the request") || resp.Message != "cannot read the request" {
		t.Errorf("Failure status under Ignore: %+v, %v", resp, err)
	}
	// An extension that is gone: a transport error too.
	e.srv.Close()
	if _, err := call("ignore.ext"); err != nil {
		t.Errorf("Ignore, server gone: %v", err)
	}
	if _, err := call("fail.ext"); err == nil {
		t.Error("Fail, server gone: no error")
	}
}

func TestTimeout(t *testing.T) {
	c := newClient(t)
	e := newExtension(t, handler("slow", runtimehooksv1.CanUpdateMachine, ptr.To[int32](1), nil))
	discovered(t, c, e.config("ext", nil))
	release := make(chan struct{})
	defer close(release)
	e.answer("canupdatemachine/slow", func(w http.ResponseWriter, _ []byte) {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		writeJSON(w, &runtimehooksv1.CanUpdateMachineResponse{CommonResponse: runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess}})
	})
	start := time.Now()
	err := c.CallExtension(context.Background(), runtimehooksv1.CanUpdateMachine, machineIn("in"), "slow.ext",
		&runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{})
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Errorf("a handler slower than its 1s timeout: %v after %s", err, took)
	}
}

func TestCallAllExtensionsAggregatesAndUnregister(t *testing.T) {
	c := newClient(t)
	if err := c.WarmUp(&runtimev1.ExtensionConfigList{}); err != nil {
		t.Fatal(err)
	}
	updateAnswer := func(retry int32, message string) func(http.ResponseWriter, []byte) {
		return func(w http.ResponseWriter, _ []byte) {
			writeJSON(w, &runtimehooksv1.UpdateMachineResponse{CommonRetryResponse: runtimehooksv1.CommonRetryResponse{
				CommonResponse:    runtimehooksv1.CommonResponse{Status: runtimehooksv1.ResponseStatusSuccess, Message: message},
				RetryAfterSeconds: retry,
			}})
		}
	}
	var configs []*runtimev1.ExtensionConfig
	for i, retry := range []int32{0, 15, 5} {
		e := newExtension(t, handler("update", runtimehooksv1.UpdateMachine, nil, nil))
		e.answer("updatemachine/update", updateAnswer(retry, "ext"+string(rune('a'+i))))
		configs = append(configs, discovered(t, c, e.config("ext"+string(rune('a'+i)), nil)))
	}
	call := func() (*runtimehooksv1.UpdateMachineResponse, error) {
		resp := &runtimehooksv1.UpdateMachineResponse{}
		err := c.CallAllExtensions(context.Background(), runtimehooksv1.UpdateMachine, machineIn("in"), &runtimehooksv1.UpdateMachineRequest{}, resp)
		return resp, err
	}
	resp, err := call()
	if err != nil {
		t.Fatal(err)
	}
	// The lowest non-zero retryAfterSeconds: the soonest an extension wants to be asked again.
	if resp.Status != runtimehooksv1.ResponseStatusSuccess || resp.RetryAfterSeconds != 5 || strings.Count(resp.Message, "ext") != 3 {
		t.Errorf("aggregated: %+v", resp)
	}
	if err := c.Unregister(configs[2]); err != nil {
		t.Fatal(err)
	}
	if resp, err = call(); err != nil || resp.RetryAfterSeconds != 15 {
		t.Errorf("after unregistering the 5s extension: %+v, %v", resp, err)
	}
	if err := c.Unregister(configs[1]); err != nil {
		t.Fatal(err)
	}
	if resp, err = call(); err != nil || resp.RetryAfterSeconds != 0 || resp.Message != "exta" {
		t.Errorf("only the done extension left: %+v, %v", resp, err)
	}
	if err := c.Unregister(configs[0]); err != nil {
		t.Fatal(err)
	}
	if names, err := c.GetAllExtensions(context.Background(), runtimehooksv1.UpdateMachine, machineIn("in")); err != nil || len(names) != 0 {
		t.Errorf("all unregistered: %v, %v", names, err)
	}
}

func TestCallExtensionWithCaching(t *testing.T) {
	c := newClient(t)
	e := newExtension(t, handler("can-update", runtimehooksv1.CanUpdateMachine, nil, nil))
	discovered(t, c, e.config("ext", nil))
	var calls atomic.Int32
	e.answer("canupdatemachine/can-update", func(w http.ResponseWriter, b []byte) {
		calls.Add(1)
		canUpdateAnswer(runtimehooksv1.ResponseStatusSuccess, "cached")(w, b)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	caching := runtimeclient.WithCaching{
		Cache: cache.New[runtimeclient.CallExtensionCacheEntry](ctx, time.Minute),
		CacheKeyFunc: func(name, rv string, _ runtimehooksv1.RequestObject) string {
			return name + "/" + rv
		},
	}
	for range 2 {
		resp := &runtimehooksv1.CanUpdateMachineResponse{}
		if err := c.CallExtension(ctx, runtimehooksv1.CanUpdateMachine, machineIn("in"), "can-update.ext", &runtimehooksv1.CanUpdateMachineRequest{}, resp, caching); err != nil || resp.Message != "cached" {
			t.Fatalf("%+v, %v", resp, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls, want 1 (the second answered from the cache)", n)
	}
}

func TestExtensionURL(t *testing.T) {
	gvh := runtimecatalog.GroupVersionHook{Group: "hooks.runtime.cluster.x-k8s.io", Version: "v1alpha1", Hook: "CanUpdateMachine"}
	for _, tc := range []struct {
		cfg  runtimev1.ClientConfig
		want string
	}{
		{runtimev1.ClientConfig{Service: runtimev1.ServiceReference{Name: "svc", Namespace: "ns", Port: ptr.To[int32](9443), Path: "/prefix"}},
			"https://svc.ns.svc:9443/prefix/hooks.runtime.cluster.x-k8s.io/v1alpha1/canupdatemachine/kairos-can-update"},
		{runtimev1.ClientConfig{Service: runtimev1.ServiceReference{Name: "svc", Namespace: "ns"}},
			"https://svc.ns.svc/hooks.runtime.cluster.x-k8s.io/v1alpha1/canupdatemachine/kairos-can-update"},
		{runtimev1.ClientConfig{URL: "https://127.0.0.1:8443/x"},
			"https://127.0.0.1:8443/x/hooks.runtime.cluster.x-k8s.io/v1alpha1/canupdatemachine/kairos-can-update"},
	} {
		u, err := extensionURL(tc.cfg, gvh, "Kairos-Can-Update")
		if err != nil || u.String() != tc.want {
			t.Errorf("%+v: %v, %v; want %s", tc.cfg, u, err, tc.want)
		}
	}
	if _, err := extensionURL(runtimev1.ClientConfig{URL: "http://127.0.0.1"}, gvh, "x"); err == nil {
		t.Error("http url: no error")
	}
}
