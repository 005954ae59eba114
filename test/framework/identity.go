package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// ImpersonatingKubeconfig returns a kubeconfig that authenticates as an administrator and
// impersonates user on every request, so that the API server authorizes requests as user (a
// ServiceAccount is system:serviceaccount:<namespace>:<name>; the API server then adds the
// ServiceAccount groups itself).
func (e *Environment) ImpersonatingKubeconfig(user string) ([]byte, error) {
	admin, err := e.AdminKubeconfig()
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.Load(admin)
	if err != nil {
		return nil, err
	}
	if len(cfg.AuthInfos) == 0 {
		return nil, fmt.Errorf("admin kubeconfig has no user")
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	return clientcmd.Write(*cfg)
}

// WriteServingCertificate writes a serving certificate for hosts (IP addresses or DNS names),
// signed by a new CA, into dir as tls.crt and tls.key, the names controller-runtime's webhook
// server reads. It returns the CA certificate (PEM) for webhook configurations' caBundle.
func WriteServingCertificate(dir string, hosts ...string) ([]byte, error) {
	ca, err := pki.NewCA("kairos-capi-test-webhook-ca", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	serving, err := ca.SignServer(hosts[0], hosts, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), serving.Cert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), serving.Key, 0o600); err != nil {
		return nil, err
	}
	return ca.Cert, nil
}
