package kairosconfig

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/common/provider/userdata"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// scope holds what one reconciliation knows and observes. Phases record observations here;
// updateStatus turns them into status in one place.
type scope struct {
	config  *bootstrapv1.KairosConfig
	owner   *configOwner
	cluster *clusterv1.Cluster

	// inputs gathered by the phases, consumed by the render phase.
	inputs userdata.Inputs

	// pendingToken is the k0s bootstrap token inside the join token of the inputs; it is
	// registered in the workload cluster only once the document rendered.
	pendingToken *pendingToken
	// tokenID names the bootstrap token generated for this node, if any.
	tokenID string
	// joinToken is the JoinTokenAvailable condition to set; nil removes it.
	joinToken *metav1.Condition
	// nodeProviderID is the NodeProviderID condition to set; nil removes it.
	nodeProviderID *metav1.Condition

	// dataSecretName is set once the bootstrap data Secret is known to exist.
	dataSecretName string
	// waitReason and waitMessage say why there is no data yet; halted stops the phases.
	waitReason, waitMessage string
	halted                  bool
	// keepStatus leaves the status as it is: nothing is known to have changed.
	keepStatus bool
}

// pendingToken is a bootstrap token built for the data but not registered yet.
type pendingToken struct {
	token token.BootstrapToken
	role  token.K0sTokenRole
}

// wait records why rendering cannot proceed and stops the remaining phases.
func (s *scope) wait(reason, format string, args ...any) {
	s.waitReason, s.waitMessage, s.halted = reason, fmt.Sprintf(format, args...), true
}

// stop stops the remaining phases without recording a wait: the work is done, or nothing is to
// be said (the control plane's scope has the same verbs: wait says why the phases stop).
func (s *scope) stop() { s.halted = true }

// Halted tells the phase runner whether a phase stopped the ones after it.
func (s *scope) Halted() bool { return s.halted }

func (s *scope) clusterKey() client.ObjectKey { return util.ObjectKey(s.cluster) }
