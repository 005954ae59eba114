// Package controllers reconciles the simulation infrastructure provider's KairosSimClusters,
// KairosSimMachines and KairosSimMachinePools in Cluster API style (pause, patch helper,
// v1beta2 conditions), on top of the simulated nodes and workload clusters of test/simnode.
package controllers

import (
	"context"
	"errors"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// Options configure the controllers Setup registers.
type Options struct {
	// Registry holds the simulated nodes and clusters. Required.
	Registry *simnode.Registry
	// WatchFilter restricts reconciliation to objects with this cluster.x-k8s.io/watch-filter
	// label value.
	WatchFilter string
	// Concurrency of each controller. Default 4.
	Concurrency int
}

// Setup registers the KairosSimCluster, KairosSimMachine and KairosSimMachinePool controllers
// with mgr. ctx must be the context the manager runs with: the machine and pool controllers
// stop listening to node events when it ends.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if o.Registry == nil {
		return errors.New("infrastructure controllers: Registry is required")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	opts := controller.Options{MaxConcurrentReconciles: o.Concurrency}
	if err := (&ClusterReconciler{
		Client: mgr.GetClient(), Registry: o.Registry, WatchFilterValue: o.WatchFilter,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return err
	}
	if err := (&MachineReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Registry: o.Registry, WatchFilterValue: o.WatchFilter,
	}).SetupWithManager(ctx, mgr, opts); err != nil {
		return err
	}
	return (&MachinePoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Registry: o.Registry, WatchFilterValue: o.WatchFilter,
	}).SetupWithManager(ctx, mgr, opts)
}
