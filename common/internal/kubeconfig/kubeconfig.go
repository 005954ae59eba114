// Package kubeconfig holds the subset of the kubeconfig file format that
// kairos-capi writes, so that common needs no client-go.
//
// Field order follows what client-go's clientcmd.Write produces (keys sorted),
// which keeps generated files familiar and k0s join tokens byte-comparable
// with the ones k0s creates itself.
package kubeconfig

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Config is a kubeconfig file.
type Config struct {
	APIVersion     string         `yaml:"apiVersion"`
	Clusters       []NamedCluster `yaml:"clusters"`
	Contexts       []NamedContext `yaml:"contexts"`
	CurrentContext string         `yaml:"current-context"`
	Kind           string         `yaml:"kind"`
	Preferences    struct{}       `yaml:"preferences"`
	Users          []NamedUser    `yaml:"users"`
}

// NamedCluster is an entry of clusters.
type NamedCluster struct {
	Cluster Cluster `yaml:"cluster"`
	Name    string  `yaml:"name"`
}

// Cluster describes an API server.
type Cluster struct {
	// CertificateAuthorityData is the base64 of the CA bundle PEM.
	CertificateAuthorityData string `yaml:"certificate-authority-data,omitempty"`
	Server                   string `yaml:"server"`
}

// NamedContext is an entry of contexts.
type NamedContext struct {
	Context Context `yaml:"context"`
	Name    string  `yaml:"name"`
}

// Context pairs a cluster and a user.
type Context struct {
	Cluster string `yaml:"cluster"`
	User    string `yaml:"user"`
}

// NamedUser is an entry of users.
type NamedUser struct {
	Name string   `yaml:"name"`
	User AuthInfo `yaml:"user"`
}

// AuthInfo holds credentials.
type AuthInfo struct {
	ClientCertificateData string `yaml:"client-certificate-data,omitempty"`
	ClientKeyData         string `yaml:"client-key-data,omitempty"`
	Token                 string `yaml:"token,omitempty"`
}

// New returns a single-cluster, single-user kubeconfig.
func New(clusterName, contextName, server string, caCert []byte, userName string, auth AuthInfo) *Config {
	return &Config{
		APIVersion: "v1",
		Kind:       "Config",
		Clusters: []NamedCluster{{
			Name: clusterName,
			Cluster: Cluster{
				Server:                   server,
				CertificateAuthorityData: base64.StdEncoding.EncodeToString(caCert),
			},
		}},
		Contexts: []NamedContext{{
			Name:    contextName,
			Context: Context{Cluster: clusterName, User: userName},
		}},
		CurrentContext: contextName,
		Users:          []NamedUser{{Name: userName, User: auth}},
	}
}

// Marshal encodes the kubeconfig as YAML.
func (c *Config) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return b.Bytes(), nil
}

// Parse decodes a kubeconfig.
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decoding kubeconfig: %w", err)
	}
	return &c, nil
}

// Current returns the cluster and user of the current context.
func (c *Config) Current() (*Cluster, *NamedUser, error) {
	var ctx *Context
	for i := range c.Contexts {
		if c.Contexts[i].Name == c.CurrentContext {
			ctx = &c.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, nil, fmt.Errorf("kubeconfig: current context %q not found", c.CurrentContext)
	}
	var cl *Cluster
	for i := range c.Clusters {
		if c.Clusters[i].Name == ctx.Cluster {
			cl = &c.Clusters[i].Cluster
		}
	}
	if cl == nil {
		return nil, nil, fmt.Errorf("kubeconfig: cluster %q not found", ctx.Cluster)
	}
	for i := range c.Users {
		if c.Users[i].Name == ctx.User {
			return cl, &c.Users[i], nil
		}
	}
	return nil, nil, fmt.Errorf("kubeconfig: user %q not found", ctx.User)
}
