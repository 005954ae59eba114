package kairoscontrolplane

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/cluster-api/util/cache"
)

// appliedStates remembers the Machine states known to be applied, by Machine uid,
// resourceVersion and desired state. It is only an optimization: after a restart, or once an
// entry expired, each Machine is read once. Entries expire like those of Cluster API's
// server-side-apply cache (util/cache, DefaultTTL), so the entries of deleted Machines, and of
// older resourceVersions, do not pile up.
type appliedStates struct {
	// ttl is how long an entry lives; default cache.DefaultTTL.
	ttl     time.Duration
	once    sync.Once
	entries cache.Cache[appliedState]
}

// appliedState is a cache key: uid, resourceVersion and desired state.
type appliedState string

func (a appliedState) Key() string { return string(a) }

func (a *appliedStates) store() cache.Cache[appliedState] {
	// One cache per reconciler, for the life of the process: its expiry sweep stops with it.
	a.once.Do(func() {
		if a.ttl <= 0 {
			a.ttl = cache.DefaultTTL
		}
		a.entries = cache.New[appliedState](context.Background(), a.ttl)
	})
	return a.entries
}

func (a *appliedStates) has(uid types.UID, rv, key string) bool {
	_, ok := a.store().Has(string(uid) + "/" + rv + "/" + key)
	return ok
}

func (a *appliedStates) set(uid types.UID, rv, key string) {
	a.store().Add(appliedState(string(uid) + "/" + rv + "/" + key))
}
