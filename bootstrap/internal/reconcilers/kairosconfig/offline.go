package kairosconfig

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/bootstrap/internal/initlock"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// NewOffline returns a reconciler that works against c alone and accepts every join token
// without a workload cluster. The preview command runs the controller's own code path with it.
func NewOffline(c client.Client) *Reconciler {
	r := &Reconciler{Client: c, APIReader: c, Tokens: offlineTokens{}, Nodes: offlineNodes{}}
	r.complete()
	return r
}

// complete fills the defaults SetupWithManager and NewOffline share.
func (r *Reconciler) complete() {
	if r.TokenTTL == 0 {
		r.TokenTTL = DefaultTokenTTL
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Tokens == nil {
		r.Tokens = clusterCacheTokens{cache: r.ClusterCache, expires: &tokenExpirations{}}
	}
	if r.Nodes == nil {
		r.Nodes = clusterCacheNodes{cache: r.ClusterCache}
	}
	r.initLock = &initlock.Lock{Client: r.Client, Reader: r.APIReader}
}

type offlineTokens struct{}

func (offlineTokens) Ready(context.Context, client.ObjectKey) error { return nil }

func (offlineTokens) Create(context.Context, client.ObjectKey, token.BootstrapToken, token.K0sTokenRole, time.Time) error {
	return nil
}

func (offlineTokens) Refresh(_ context.Context, _ client.ObjectKey, _ string, expires, _ time.Time) (time.Time, error) {
	return expires, nil
}
