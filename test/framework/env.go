// Package framework starts the real API servers the integration tests run against: a
// management cluster with Cluster API's and our CRDs and webhooks, and bare workload clusters.
// It builds the envtest binaries from source when they are not there yet, so `go test` works on
// a machine with only Go.
package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot returns the repository root (the directory holding go.work).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory")
		}
		dir = parent
	}
}

var assets = sync.OnceValues(func() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	// The same builder `make envtest-assets` runs; it prints the cached folder.
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-assets.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building envtest assets: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// Assets returns the folder holding kube-apiserver and etcd.
func Assets() (string, error) { return assets() }

// moduleDir returns the module cache folder of a dependency of the test module.
func moduleDir(module string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = filepath.Join(root, "test")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s: %w", module, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// LoadCRDs reads the CustomResourceDefinitions of YAML files and adds the Cluster API contract
// labels clusterctl would add (every served version maps to the contract of the same name).
func LoadCRDs(files ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := dec.Decode(crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if crd.Name == "" {
				continue
			}
			if crd.Labels == nil {
				crd.Labels = map[string]string{}
			}
			for _, v := range crd.Spec.Versions {
				if v.Served && strings.HasPrefix(v.Name, "v1beta") {
					crd.Labels["cluster.x-k8s.io/"+v.Name] = v.Name
				}
			}
			crds = append(crds, crd)
		}
	}
	return crds, nil
}

// CAPICRDFiles returns Cluster API's core CRD files from the cluster-api module.
func CAPICRDFiles() ([]string, error) {
	dir, err := moduleDir("sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}
	return filepath.Glob(filepath.Join(dir, "core", "config", "crd", "bases", "*.yaml"))
}

// ProjectCRDFiles returns our CRD files of the given providers ("bootstrap", "controlplane").
func ProjectCRDFiles(providers ...string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	var files []string
	for _, p := range providers {
		f, err := filepath.Glob(filepath.Join(root, p, "config", "crd", "bases", "*.yaml"))
		if err != nil {
			return nil, err
		}
		if len(f) == 0 {
			return nil, fmt.Errorf("no CRDs under %s/config/crd/bases", p)
		}
		files = append(files, f...)
	}
	return files, nil
}

// Environment is a started API server.
type Environment struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
}

// Options configure a management environment.
type Options struct {
	// CRDs to install.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// WebhookDirs hold controller-gen webhook manifests to install, served locally.
	WebhookDirs []string
	// Scheme of the returned client.
	Scheme *runtime.Scheme
}

// Start starts an API server (and etcd) with the given CRDs and webhooks.
func Start(o Options) (*Environment, error) {
	dir, err := Assets()
	if err != nil {
		return nil, err
	}
	mutating, validating, err := loadWebhooks(o.WebhookDirs)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDs:                  o.CRDs,
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: mutating, ValidatingWebhooks: validating},
	}
	cfg, err := StartTuned(env)
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	scheme := o.Scheme
	if scheme == nil {
		scheme = runtime.NewScheme()
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Environment{Environment: env, Config: cfg, Client: c}, nil
}

// StartCore starts an API server without CRDs or webhooks, whose client knows the core kinds,
// and stops it when the test ends.
func StartCore(t testing.TB) *Environment {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := Start(Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// WaitForWebhooks blocks until the local webhook server accepts TLS connections.
func (e *Environment) WaitForWebhooks(timeout time.Duration) error {
	o := e.WebhookInstallOptions
	addr := net.JoinHostPort(o.LocalServingHost, strconv.Itoa(o.LocalServingPort))
	deadline := time.Now().Add(timeout)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server at %s not ready: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AdminKubeconfig returns a kubeconfig with cluster-admin rights on the environment.
func (e *Environment) AdminKubeconfig() ([]byte, error) {
	user, err := e.AddUser(envtest.User{Name: "kairos-capi-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	return user.KubeConfig()
}

// loadWebhooks reads controller-gen webhook manifests. Every provider's generated
// configurations have the same names (its kustomize namePrefix makes them unique when
// installed), and envtest would silently let one overwrite the other: prefix them with the
// provider's folder name (bootstrap, controlplane, core) the same way.
func loadWebhooks(dirs []string) ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	var (
		mutating   []*admissionv1.MutatingWebhookConfiguration
		validating []*admissionv1.ValidatingWebhookConfiguration
	)
	for _, dir := range dirs {
		prefix := filepath.Base(filepath.Dir(filepath.Dir(filepath.Clean(dir)))) + "-"
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return nil, nil, err
		}
		if len(files) == 0 {
			return nil, nil, fmt.Errorf("no webhook manifests in %s: run make generate", dir)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, nil, err
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			for {
				u := &unstructured.Unstructured{}
				if err := dec.Decode(&u.Object); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					return nil, nil, fmt.Errorf("%s: %w", f, err)
				}
				switch u.GetKind() {
				case "MutatingWebhookConfiguration":
					w := &admissionv1.MutatingWebhookConfiguration{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, w); err != nil {
						return nil, nil, err
					}
					w.Name = prefix + w.Name
					mutating = append(mutating, w)
				case "ValidatingWebhookConfiguration":
					w := &admissionv1.ValidatingWebhookConfiguration{}
					if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, w); err != nil {
						return nil, nil, err
					}
					w.Name = prefix + w.Name
					validating = append(validating, w)
				}
			}
		}
	}
	return mutating, validating, nil
}

// NewNamespace creates a namespace named after prefix for one test.
func NewNamespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// StartControllerManager runs kube-controller-manager's garbage collector and namespace
// controller against the environment, as every real management cluster has them: deleting an
// object then deletes what it owns (owner references), and deleting a namespace deletes its
// content. envtest runs no controller manager, so without this a deleted Cluster would leave its
// Secrets and Kairos objects behind in tests although it would not in reality. The process logs
// to dir and dies with the test process.
func (e *Environment) StartControllerManager(dir string) (*Process, error) {
	kubeconfig, err := e.AdminKubeconfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for kube-controller-manager: %w", err)
	}
	return StartControllerManager(dir, kubeconfig, "garbage-collector-controller", "namespace-controller")
}

// StartControllerManager runs the given controllers of the envtest assets'
// kube-controller-manager (by the names its --controllers flag takes, for example
// token-cleaner-controller) against the API server of kubeconfig, which needs cluster-admin
// rights. The process logs to dir/kube-controller-manager.log and dies with the test process.
func StartControllerManager(dir string, kubeconfig []byte, controllers ...string) (*Process, error) {
	if len(controllers) == 0 {
		return nil, errors.New("kube-controller-manager: no controllers to run")
	}
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	return StartProcess("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), nil,
		filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+path,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		// No HTTPS endpoint: nothing scrapes it, and several test processes may run at once.
		"--secure-port=0",
		"--kube-api-qps=100", "--kube-api-burst=200",
		"--concurrent-gc-syncs=10",
		"-v=1",
	)
}

// Kubeconfig returns a kubeconfig for a rest.Config that authenticates with a client
// certificate or a bearer token given inline (as the admin configs of the simulated workload
// clusters do).
func Kubeconfig(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CertData) == 0 && cfg.BearerToken == "" {
		return nil, errors.New("kubeconfig: the rest.Config has no inline client certificate or token")
	}
	const name = "default"
	return clientcmd.Write(clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{name: {
			Server: cfg.Host, CertificateAuthorityData: cfg.CAData, InsecureSkipTLSVerify: cfg.Insecure,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{name: {
			ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: name}},
		CurrentContext: name,
	})
}
