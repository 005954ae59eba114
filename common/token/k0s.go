package token

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/internal/kubeconfig"
)

// K0sTokenRole is the kind of k0s join token.
type K0sTokenRole string

const (
	// K0sWorkerToken joins a worker through the Kubernetes API.
	K0sWorkerToken K0sTokenRole = "worker"
	// K0sControllerToken joins a controller through the k0s join API.
	K0sControllerToken K0sTokenRole = "controller"
)

const (
	// K0sJoinAPIPort is the port of the k0s controller join API.
	K0sJoinAPIPort = 9443
	// K0sKubeconfigName is the cluster and context name in k0s join tokens.
	K0sKubeconfigName = "k0s"
	// K0sWorkerTokenUser is the kubeconfig user of worker join tokens.
	K0sWorkerTokenUser = "kubelet-bootstrap"
	// K0sControllerTokenUser is the kubeconfig user of controller join tokens.
	K0sControllerTokenUser = "controller-bootstrap"
)

// User returns the kubeconfig user name k0s uses for the role.
func (r K0sTokenRole) User() (string, error) {
	switch r {
	case K0sWorkerToken:
		return K0sWorkerTokenUser, nil
	case K0sControllerToken:
		return K0sControllerTokenUser, nil
	}
	return "", fmt.Errorf("token: unknown k0s token role %q (want %q or %q)", r, K0sWorkerToken, K0sControllerToken)
}

// usage is the bootstrap-token usage k0s requires for the role.
func (r K0sTokenRole) usage() string {
	if r == K0sControllerToken {
		return "controller-join"
	}
	return "authentication"
}

// K0sJoinURL is the URL a join token of the role points at: the Kubernetes
// API (host:apiPort) for workers, the k0s join API (host:9443) for
// controllers.
func K0sJoinURL(role K0sTokenRole, host string, apiPort int32) (string, error) {
	if host == "" {
		return "", errors.New("token: k0s join URL host is empty")
	}
	var port int
	switch role {
	case K0sWorkerToken:
		if apiPort <= 0 || apiPort > 65535 {
			return "", fmt.Errorf("token: invalid API port %d", apiPort)
		}
		port = int(apiPort)
	case K0sControllerToken:
		port = K0sJoinAPIPort
	default:
		_, err := role.User()
		return "", err
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(port))}).String(), nil
}

// K0sJoinKubeconfig builds the kubeconfig inside a k0s join token, as k0s
// does: cluster and context "k0s", the role's user, token credentials.
func K0sJoinKubeconfig(role K0sTokenRole, server string, caCert []byte, t BootstrapToken) ([]byte, error) {
	user, err := role.User()
	if err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("token: k0s join server %q is not an https URL", server)
	}
	if !bytes.Contains(caCert, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, errors.New("token: k0s join token CA is not a PEM certificate")
	}
	cfg := kubeconfig.New(K0sKubeconfigName, K0sKubeconfigName, server, caCert, user, kubeconfig.AuthInfo{Token: t.String()})
	return cfg.Marshal()
}

// EncodeK0sJoinToken compresses (gzip, best compression) and base64-encodes
// (standard alphabet, padded) a join-token kubeconfig, as "k0s token create"
// does.
func EncodeK0sJoinToken(kubeconfig []byte) (string, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(kubeconfig); err != nil {
		return "", fmt.Errorf("token: compressing join token: %w", err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("token: compressing join token: %w", err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// DecodeK0sJoinToken returns the kubeconfig inside a join token.
func DecodeK0sJoinToken(s string) ([]byte, error) {
	gz, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("token: k0s join token is not base64: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("token: k0s join token is not gzip: %w", err)
	}
	defer zr.Close()
	// A join token is a few KiB; refuse absurd sizes.
	out, err := io.ReadAll(io.LimitReader(zr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("token: decompressing k0s join token: %w", err)
	}
	return out, nil
}

// NewK0sJoinToken builds and encodes a join token.
func NewK0sJoinToken(role K0sTokenRole, server string, caCert []byte, t BootstrapToken) (string, error) {
	kc, err := K0sJoinKubeconfig(role, server, caCert, t)
	if err != nil {
		return "", err
	}
	return EncodeK0sJoinToken(kc)
}

// K0sJoinTokenInfo is what a k0s join token carries.
type K0sJoinTokenInfo struct {
	Role   K0sTokenRole
	Server string
	CACert []byte
	Token  BootstrapToken
}

// ParseK0sJoinToken decodes a join token and identifies its role from the
// kubeconfig user, as k0s does.
func ParseK0sJoinToken(s string) (*K0sJoinTokenInfo, error) {
	raw, err := DecodeK0sJoinToken(s)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfig.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("token: k0s join token: %w", err)
	}
	cluster, user, err := kc.Current()
	if err != nil {
		return nil, fmt.Errorf("token: k0s join token: %w", err)
	}
	info := &K0sJoinTokenInfo{Server: cluster.Server}
	switch user.Name {
	case K0sWorkerTokenUser:
		info.Role = K0sWorkerToken
	case K0sControllerTokenUser:
		info.Role = K0sControllerToken
	default:
		return nil, fmt.Errorf("token: k0s join token has unknown user %q", user.Name)
	}
	if info.CACert, err = base64.StdEncoding.DecodeString(cluster.CertificateAuthorityData); err != nil {
		return nil, fmt.Errorf("token: k0s join token CA: %w", err)
	}
	if info.Token, err = ParseBootstrapToken(user.User.Token); err != nil {
		return nil, err
	}
	return info, nil
}

// K0sBootstrapTokenSecretData returns the data of the kube-system Secret
// (type bootstrap.kubernetes.io/token, named t.SecretName()) that makes a k0s
// join token valid, with the usages k0s itself sets. A zero expires means no
// expiry.
func K0sBootstrapTokenSecretData(role K0sTokenRole, t BootstrapToken, expires time.Time) (map[string]string, error) {
	if _, err := role.User(); err != nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	data := map[string]string{
		"token-id":                        t.ID,
		"token-secret":                    t.Secret,
		"description":                     fmt.Sprintf("k0s %s join token created by kairos-capi", role),
		"usage-bootstrap-" + role.usage(): "true",
	}
	if role == K0sControllerToken {
		// k0s also writes (and still accepts) the legacy usage key.
		data["usage-controller-join"] = "true"
	}
	if !expires.IsZero() {
		data["expiration"] = expires.UTC().Format(time.RFC3339)
	}
	return data, nil
}

// K0sBootstrapTokenSecretType is the Secret type of bootstrap tokens.
const K0sBootstrapTokenSecretType = "bootstrap.kubernetes.io/token"

type secretManifest struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   secretMeta        `yaml:"metadata"`
	Type       string            `yaml:"type"`
	Data       map[string]string `yaml:"data"`
}

type secretMeta struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace"`
}

// K0sBootstrapTokenManifest returns the bootstrap-token Secret as a YAML
// manifest, to be placed in the k0s manifest directory of the first
// controller so that tokens issued before the cluster exists are valid as
// soon as it does.
func K0sBootstrapTokenManifest(role K0sTokenRole, t BootstrapToken, expires time.Time) ([]byte, error) {
	data, err := K0sBootstrapTokenSecretData(role, t, expires)
	if err != nil {
		return nil, err
	}
	enc := make(map[string]string, len(data))
	for k, v := range data {
		enc[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	var buf bytes.Buffer
	ye := yaml.NewEncoder(&buf)
	ye.SetIndent(2)
	err = ye.Encode(secretManifest{
		APIVersion: "v1",
		Kind:       "Secret",
		Metadata:   secretMeta{Name: t.SecretName(), Namespace: "kube-system"},
		Type:       K0sBootstrapTokenSecretType,
		Data:       enc,
	})
	if err == nil {
		err = ye.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("token: encoding bootstrap token manifest: %w", err)
	}
	return buf.Bytes(), nil
}
