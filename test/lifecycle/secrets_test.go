package lifecycle

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// secretNeedles collects the secret material a cluster's management and workload sides hold:
// every private key of every Secret in the namespace (the cluster CAs, the service-account key,
// the kubeconfig's client key, the keys the bootstrap data carries), every bootstrap-token
// secret and k3s token, and the login password. A needle is a piece long enough to be unique.
func secretNeedles(ctx context.Context, t *testing.T, namespace string, workload client.Client, password string) map[string]string {
	t.Helper()
	needles := map[string]string{}
	add := func(what, s string) {
		if len(s) >= 12 {
			needles[s] = what
			needles[base64.StdEncoding.EncodeToString([]byte(s))] = what + " (base64)"
		}
	}
	addPEM := func(what string, data []byte) {
		for rest := data; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if strings.Contains(block.Type, "PRIVATE KEY") {
				// The encoded key's middle: a log holding the key in any PEM form holds it.
				enc := base64.StdEncoding.EncodeToString(block.Bytes)
				needles[enc[len(enc)/2:len(enc)/2+40]] = what + " private key"
			}
		}
	}
	add("login password", password)

	secrets := &corev1.SecretList{}
	if err := h.Client.List(ctx, secrets, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		for key, data := range s.Data {
			what := fmt.Sprintf("Secret %s key %s", s.Name, key)
			addPEM(what, data)
			if cfg, err := clientcmd.Load(data); err == nil && len(cfg.AuthInfos) > 0 {
				for _, a := range cfg.AuthInfos {
					addPEM(what+" kubeconfig", a.ClientKeyData)
					add(what+" kubeconfig token", a.Token)
				}
			}
			// Tokens stored whole (the k3s cluster token, join tokens in bootstrap data).
			for _, line := range strings.Split(string(data), "\n") {
				for _, field := range strings.Fields(line) {
					if strings.HasPrefix(field, "K10") && strings.Contains(field, "::") {
						add(what+" k3s token", field)
						add(what+" k3s token password", field[strings.LastIndex(field, ":")+1:])
					}
				}
			}
		}
	}
	tokens := &corev1.SecretList{}
	if err := workload.List(ctx, tokens, client.InNamespace("kube-system")); err != nil {
		t.Fatal(err)
	}
	for _, s := range tokens.Items {
		if s.Type == corev1.SecretTypeBootstrapToken {
			add("bootstrap token secret of "+s.Name, string(s.Data["token-secret"]))
		}
	}
	if len(needles) < 10 {
		t.Fatalf("only %d pieces of secret material found: the search would prove nothing", len(needles))
	}
	return needles
}

// assertNoSecretMaterial fails when a log line, an Event or a condition message (of the
// management or the workload cluster) holds a piece of secret material.
func assertNoSecretMaterial(ctx context.Context, t *testing.T, namespace string, workload client.Client, needles map[string]string, logs string) {
	t.Helper()
	var haystack []string
	haystack = append(haystack, logs)
	for _, c := range []client.Client{h.Client, workload} {
		events := &corev1.EventList{}
		if err := c.List(ctx, events); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			haystack = append(haystack, e.Message, e.Reason)
		}
	}
	objs, err := namespaceObjectsJSON(ctx, namespace)
	if err != nil {
		t.Fatal(err)
	}
	haystack = append(haystack, objs...)
	for needle, what := range needles {
		for _, hay := range haystack {
			if i := strings.Index(hay, needle); i >= 0 {
				from, to := max(0, strings.LastIndex(hay[:i], "\n")), min(len(hay), i+len(needle)+20)
				t.Errorf("%s appears in logs, events or status: %q", what, strings.ReplaceAll(hay[from:to], needle, "<SECRET>"))
				break
			}
		}
	}
	t.Logf("searched %d bytes of logs, events and status for %d pieces of secret material", len(logs), len(needles))
}

// namespaceObjectsJSON returns the status of every Cluster API and Kairos object of a namespace:
// conditions carry messages, which must never quote secrets either.
func namespaceObjectsJSON(ctx context.Context, namespace string) ([]string, error) {
	var out []string
	for _, list := range []client.ObjectList{
		&clusterv1.ClusterList{}, &clusterv1.MachineList{}, &clusterv1.MachineSetList{}, &clusterv1.MachineDeploymentList{},
		&controlplanev1.KairosControlPlaneList{}, &bootstrapv1.KairosConfigList{}, &infrav1.KairosSimMachineList{},
	} {
		if err := h.Client.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return nil, err
		}
		// Only the status: a spec holds what the user wrote (an inline password is theirs).
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				return err
			}
			data, err := json.Marshal(u["status"])
			out = append(out, string(data))
			return err
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
