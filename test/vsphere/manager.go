package vsphere

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
)

const (
	// Module is CAPV's Go module; Version the release the vSphere flavor is checked against.
	Module  = "sigs.k8s.io/cluster-api-provider-vsphere"
	Version = "v1.16.1"
	// CAPVNamespace and CAPVServiceAccount are where clusterctl would install CAPV
	// (CAPV/config/default: namespace capv-system, namePrefix capv-).
	CAPVNamespace      = "capv-system"
	CAPVServiceAccount = "capv-manager"
)

// ManagerBinary returns the path of CAPV's manager binary of a version: hack/capv-manager.sh
// builds it through the module proxy when it is not cached (minutes), or prints where it is.
func ManagerBinary(version string) (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "capv-manager.sh"))
	cmd.Env = append(os.Environ(), "CAPV_VERSION="+version)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/capv-manager.sh (CAPV %s): %w", version, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// CRDFiles are CAPV's govmomi-mode CRDs (CAPV/config/default/crd/bases). Never add the
// supervisor CRDs next to them: with both, CAPV's main.go refuses to start.
func CRDFiles(capvDir string) ([]string, error) {
	crds, err := filepath.Glob(filepath.Join(capvDir, "config", "default", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs under %s/config/default/crd/bases (%v)", capvDir, err)
	}
	return crds, nil
}

// ManagerOptions say how to run CAPV's manager.
type ManagerOptions struct {
	// CAPVDir is CAPV's module folder (ModuleDir), for its RBAC.
	CAPVDir string
	// Binary is the manager (ManagerBinary).
	Binary string
	// LogDir receives the manager's log, kubeconfig, credentials and webhook certificates.
	LogDir string
	// PodName is the manager's POD_NAME (default capv-manager-test).
	PodName string
}

// StartManager runs CAPV's manager binary against the harness' API server as CAPV's
// ServiceAccount, bound to the manager-role of CAPV's config/rbac/role.yaml, with the vCenter
// credentials in the file its --credentials-file flag reads (pkg/manager/options.go:
// "username" and "password" keys; config/base/credentials.yaml ships the same).
func StartManager(ctx context.Context, h *harness.Harness, o ManagerOptions, vc *VCSim) (*framework.Process, error) {
	if o.PodName == "" {
		o.PodName = "capv-manager-test"
	}
	c := h.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CAPVNamespace}}); err != nil {
		return nil, err
	}
	roleYAML, err := os.ReadFile(filepath.Join(o.CAPVDir, "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(bytes.TrimPrefix(roleYAML, []byte("---\n")), role); err != nil {
		return nil, fmt.Errorf("CAPV's role.yaml: %w", err)
	}
	role.Name = "capv-manager-role"
	if err := c.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "capv-manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: CAPVServiceAccount, Namespace: CAPVNamespace}},
	}); err != nil {
		return nil, err
	}
	kubeconfig, err := h.Env.ImpersonatingKubeconfig("system:serviceaccount:" + CAPVNamespace + ":" + CAPVServiceAccount)
	if err != nil {
		return nil, err
	}
	kubeconfigPath := filepath.Join(o.LogDir, "capv.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	credentials := filepath.Join(o.LogDir, "credentials.yaml")
	creds, err := yaml.Marshal(map[string]string{"username": vc.User, "password": vc.Pass})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(credentials, creds, 0o600); err != nil {
		return nil, err
	}
	// CAPV's manager always starts its webhook server; nothing calls it here (no webhook
	// configurations are installed for CAPV's kinds).
	certDir := filepath.Join(o.LogDir, "webhook-certs")
	if _, err := framework.WriteServingCertificate(certDir, "127.0.0.1"); err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = framework.FreePort(); err != nil {
			return nil, err
		}
	}
	local := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	return framework.StartProcess("capv-manager", filepath.Join(o.LogDir, "capv-manager.log"),
		[]string{"KUBECONFIG=" + kubeconfigPath, "POD_NAMESPACE=" + CAPVNamespace, "POD_NAME=" + o.PodName},
		o.Binary,
		"--leader-elect=false",
		"--credentials-file="+credentials,
		"--webhook-port="+strconv.Itoa(ports[0]),
		"--webhook-cert-dir="+certDir,
		"--health-addr="+local(ports[1]),
		"--diagnostics-address="+local(ports[2]),
		"--insecure-diagnostics",
	)
}

// ModuleDir downloads module@version through the module proxy (or finds it in the module
// cache) and returns its folder. It runs outside the workspace: CAPV is not a dependency of
// the test module (it pins Cluster API v1.13).
func ModuleDir(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", modVersion, errors.Join(err, jerr), info.Error)
	}
	return info.Dir, nil
}
