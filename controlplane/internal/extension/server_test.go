package extension

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/webhook"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

// The handlers are routed on the given (manager's) webhook server, discovery included.
func TestRegisterOnWebhookServer(t *testing.T) {
	ws := webhook.NewServer(webhook.Options{})
	if err := Register(context.Background(), ws, &Handlers{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ws.WebhookMux())
	defer srv.Close()

	post := func(path string, body any, out any) {
		t.Helper()
		data, _ := json.Marshal(body)
		r, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		if r.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d", path, r.StatusCode)
		}
		if err := json.NewDecoder(r.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	disc := &runtimehooksv1.DiscoveryResponse{}
	post(DiscoveryPath, &runtimehooksv1.DiscoveryRequest{}, disc)
	got := map[string]string{}
	for _, h := range disc.Handlers {
		got[h.Name] = h.RequestHook.Hook
	}
	want := map[string]string{CanUpdateMachineHandler: "CanUpdateMachine", CanUpdateMachineSetHandler: "CanUpdateMachineSet", UpdateMachineHandler: "UpdateMachine"}
	for n, hook := range want {
		if got[n] != hook {
			t.Errorf("discovery: handler %s = %q, want %q (all: %v)", n, got[n], hook, got)
		}
	}
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	post("/hooks.runtime.cluster.x-k8s.io/v1alpha1/canupdatemachine/"+CanUpdateMachineHandler, &runtimehooksv1.CanUpdateMachineRequest{}, resp)
	if resp.Status == "" {
		t.Errorf("CanUpdateMachine answered no status")
	}
}
