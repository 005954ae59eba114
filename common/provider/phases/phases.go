// Package phases runs the phases of a reconciliation, as both Kairos reconcilers structure
// theirs: each phase observes and acts on the reconciliation's scope, and may halt the phases
// after it (it started an operation, or something it needs is missing and it said what). The
// requeue requests of the phases that ran are combined: the soonest wins.
package phases

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/util"
)

// Scope is what the phases of one reconciliation share.
type Scope interface {
	// Halted tells whether a phase stopped the ones after it.
	Halted() bool
}

// Phase is one step of a reconciliation.
type Phase[S Scope] func(context.Context, S) (ctrl.Result, error)

// Run runs the phases in order until one fails or halts the scope.
func Run[S Scope](ctx context.Context, s S, phases ...Phase[S]) (ctrl.Result, error) {
	var res ctrl.Result
	for _, p := range phases {
		r, err := p(ctx, s)
		if err != nil {
			return ctrl.Result{}, err
		}
		res = util.LowestNonZeroResult(res, r)
		if s.Halted() {
			break
		}
	}
	return res, nil
}
