package kairoscontrolplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/collections"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/controlplane/internal/desiredstate"
)

// scope is what one reconciliation knows about a control plane. Phases fill the observations;
// updateStatus turns them into status in one place.
type scope struct {
	kcp     *controlplanev1.KairosControlPlane
	cluster *clusterv1.Cluster

	// machines are the control-plane Machines this KairosControlPlane owns.
	machines collections.Machines
	// configs are the KairosConfigs of those Machines, by Machine name.
	configs map[string]*bootstrapv1.KairosConfig
	// infraMachines are the infrastructure machines of those Machines, by Machine name.
	infraMachines map[string]*unstructured.Unstructured
	// ownedConfigs are, by Machine name, the parts of the KairosConfig specs the control plane
	// set itself (see ownedFields); absent for KairosConfigs whose managedFields do not say.
	ownedConfigs map[string]*bootstrapv1.KairosConfigSpec
	// baseConfig is the KairosConfig spec the Machines are built from: the inline spec or the
	// referenced template's; nil while the template cannot be read.
	baseConfig *bootstrapv1.KairosConfigSpec
	// bootstrap is the installed bootstrap provider as its KairosConfig CRD describes it; nil
	// while the control plane is being deleted (it creates nothing then).
	bootstrap *bootstrapProvider
	// configRefused says why the API server refused the KairosConfig of a new Machine.
	configRefused string

	// etcd is what etcd itself said about its members, asked once per reconciliation once the
	// control plane is initialized; nil before.
	etcd *etcdState
	// apiServed tells whether Cluster API's ClusterCache reaches the workload API server.
	apiServed bool

	// upToDateResults memoizes upToDate: the reasons each Machine is outdated, by name.
	upToDateResults map[string][]string

	// reconcileTime is "now" for every time comparison of this reconciliation.
	reconcileTime time.Time

	// halted stops the remaining phases; waitMessage says what they wait for.
	halted      bool
	waitMessage string

	// Observations for status.
	certificatesErr     error
	configTemplateErr   string
	infraTemplateErr    string
	preflightMessages   []string
	remediationMessages []string
	remediationReason   string
	remediationRequeue  time.Duration
	// etcdLeaveMessages say why etcd members that should leave (those of deleting Machines, and
	// those that match no Machine) do not, for EtcdClusterHealthy.
	etcdLeaveMessages []string
	deletingReason    string
	deletingMessage   string
	// restore is what is known of a restore from an etcd snapshot (reconcileEtcdRestore).
	restore etcdRestore
	// snapshots is the last listing of the etcd snapshots' store (reconcileEtcdSnapshots).
	snapshots snapshotListing
	// inPlaceMessage says which path the rollout took for the Machine it acted on, when in-place
	// updates were considered: updated in place, or replaced and why.
	inPlaceMessage string
	// inPlaceFailures say, by Machine name, why the in-place updates Cluster API reported failed
	// did (what the node reported; see observeInPlaceFailures).
	inPlaceFailures map[string]string
}

// wait records what the control plane waits for and stops the remaining phases (the bootstrap
// provider's scope has the same verb: wait says why the phases stop, stop says nothing).
func (s *scope) wait(format string, args ...any) {
	s.halted, s.waitMessage = true, fmt.Sprintf(format, args...)
}

// blockLeave is wait for an etcd member that must not or cannot leave: the reason also goes to
// EtcdClusterHealthy, where it is seen whatever the replica counts say (while a rollout's old
// Machine is deleted they match, and ScalingUp and ScalingDown, which show waits, are False).
func (s *scope) blockLeave(format string, args ...any) {
	s.wait(format, args...)
	s.etcdLeaveMessages = append(s.etcdLeaveMessages, s.waitMessage)
}

// Halted tells the phase runner whether a phase stopped the ones after it.
func (s *scope) Halted() bool { return s.halted }

// remediation records what the remediation phase did or waits for, for the Remediating condition.
func (s *scope) remediation(reason, format string, args ...any) {
	s.remediationReason = reason
	s.remediationMessages = append(s.remediationMessages, fmt.Sprintf(format, args...))
}

func machineReady(m *clusterv1.Machine) bool {
	return conditions.IsTrue(m, clusterv1.MachineReadyCondition)
}

func (s *scope) clusterKey() client.ObjectKey {
	return client.ObjectKey{Namespace: s.cluster.Namespace, Name: s.cluster.Name}
}

func (s *scope) desiredReplicas() int { return int(ptr.Deref(s.kcp.Spec.Replicas, 1)) }

// scalingTarget is what the scaling conditions measure the control plane against:
// spec.replicas, or none once it is being deleted, as KubeadmControlPlane's do (a control plane
// on its way out is not "scaling up from 0 to 3").
func (s *scope) scalingTarget() int {
	if !s.kcp.DeletionTimestamp.IsZero() {
		return 0
	}
	return s.desiredReplicas()
}

func (s *scope) initialized() bool {
	return ptr.Deref(s.kcp.Status.Initialization.ControlPlaneInitialized, false)
}

func (s *scope) deletingMachines() collections.Machines {
	return s.machines.Filter(collections.HasDeletionTimestamp)
}

func (s *scope) activeMachines() collections.Machines {
	return s.machines.Filter(collections.ActiveMachines)
}

// requestedConfig is the KairosConfig spec the control plane asks for a new Machine (see
// desiredstate.RequestedKairosConfigSpec); nil while the base spec cannot be read.
func (s *scope) requestedConfig() *bootstrapv1.KairosConfigSpec {
	if s.baseConfig == nil {
		return nil
	}
	return desiredstate.RequestedKairosConfigSpec(s.baseConfig, s.kcp.Spec.Distribution, s.desiredReplicas() == 1, s.kcp.Spec.Etcd.Snapshots)
}

// restoresFromSnapshot says whether the next control-plane Machine starts the cluster again from
// the newest etcd snapshot instead of joining it: the control plane was initialized, no active
// control-plane Machine is left to join, and spec.etcd.snapshots is set (docs/backups.md).
func (s *scope) restoresFromSnapshot() bool {
	return s.initialized() && s.activeMachines().Len() == 0 && s.kcp.Spec.Etcd.Snapshots != nil
}

// desiredConfig is the requested spec with defaults applied, what Machines are compared with.
func (s *scope) desiredConfig() *bootstrapv1.KairosConfigSpec {
	if s.baseConfig == nil {
		return nil
	}
	return desiredstate.KairosConfigSpec(s.baseConfig, s.kcp.Spec.Distribution, s.desiredReplicas() == 1, s.kcp.Spec.Etcd.Snapshots)
}

// upToDate says whether a Machine matches the spec, and if not, why. It is computed once per
// Machine and reconciliation: status, syncMachines and the scale phases all ask.
func (s *scope) upToDate(m *clusterv1.Machine) (bool, []string) {
	if r, ok := s.upToDateResults[m.Name]; ok {
		return len(r) == 0, r
	}
	reasons := s.compareWithSpec(m)
	if s.upToDateResults == nil {
		s.upToDateResults = map[string][]string{}
	}
	s.upToDateResults[m.Name] = reasons
	return len(reasons) == 0, reasons
}

// compareWithSpec lists how a Machine differs from the spec. Single-node mode is not compared:
// it follows the replica count, and scaling is no reason to replace Machines (the control-plane
// taint follows it instead, see reconcileControlPlaneTaints).
func (s *scope) compareWithSpec(m *clusterv1.Machine) []string {
	var reasons []string
	if m.Spec.Version != s.kcp.Spec.Version {
		reasons = append(reasons, fmt.Sprintf("version %s, want %s", m.Spec.Version, s.kcp.Spec.Version))
	}
	// Cluster API records the template an infrastructure machine was cloned from on it.
	if infra, ok := s.infraMachines[m.Name]; ok {
		want := s.kcp.Spec.MachineTemplate.Spec.InfrastructureRef
		from := infra.GetAnnotations()
		if from[clusterv1.TemplateClonedFromNameAnnotation] != want.Name ||
			from[clusterv1.TemplateClonedFromGroupKindAnnotation] != want.GroupKind().String() {
			reasons = append(reasons, fmt.Sprintf("infrastructure template %s, want %s",
				from[clusterv1.TemplateClonedFromNameAnnotation], want.Name))
		}
	}
	if config, ok := s.configs[m.Name]; ok && s.baseConfig != nil {
		// Only what the control plane asked for counts: defaults of the installed bootstrap
		// provider, and fields this control plane does not know, are no reason to roll out.
		// Both sides get this control plane's defaults, so that a release that only adds
		// defaults changes nothing either.
		have := config.Spec.DeepCopy()
		if owned, ok := s.ownedConfigs[m.Name]; ok {
			have = owned.DeepCopy()
		}
		have.Default()
		want := s.desiredConfig()
		have.SingleNode, want.SingleNode = false, false
		// Restoring is how the Machine started, not a setting it must keep.
		if have.EtcdSnapshots != nil {
			have.EtcdSnapshots.Restore = ""
		}
		if !equality.Semantic.DeepEqual(have, want) {
			reasons = append(reasons, "KairosConfig spec changed")
		}
	}
	if s.rolloutAfterExpired(m) {
		reasons = append(reasons, fmt.Sprintf("created before rollout.after %s", s.kcp.Spec.Rollout.After.UTC().Format(time.RFC3339)))
	}
	return reasons
}

// rolloutAfterExpired tells whether spec.rollout.after has passed since the Machine was created.
func (s *scope) rolloutAfterExpired(m *clusterv1.Machine) bool {
	after := s.kcp.Spec.Rollout.After
	return !after.IsZero() && after.Time.Before(s.reconcileTime) && m.CreationTimestamp.Time.Before(after.Time)
}

// outdatedMachines returns the active Machines that need a rollout, with the reasons.
func (s *scope) outdatedMachines() (collections.Machines, map[string][]string) {
	out := collections.New()
	reasons := map[string][]string{}
	for _, m := range s.activeMachines() {
		if ok, why := s.upToDate(m); !ok {
			out.Insert(m)
			reasons[m.Name] = why
		}
	}
	return out, reasons
}

// controlPlaneFailureDomains are the Cluster's failure domains flagged for control planes.
func (s *scope) controlPlaneFailureDomains() []clusterv1.FailureDomain {
	var out []clusterv1.FailureDomain
	for _, fd := range s.cluster.Status.FailureDomains {
		if ptr.Deref(fd.ControlPlane, false) {
			out = append(out, fd)
		}
	}
	return out
}

// machineNames lists Machine names sorted, for messages.
func machineNames(ms collections.Machines) string {
	names := ms.Names()
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// loadBaseConfig reads the KairosConfig spec the Machines are built from.
func (r *Reconciler) loadBaseConfig(ctx context.Context, s *scope) error {
	ref := s.kcp.Spec.KairosConfigTemplate
	if ref == nil {
		s.baseConfig = s.kcp.Spec.KairosConfigSpec.DeepCopy()
		return nil
	}
	tmpl := &bootstrapv1.KairosConfigTemplate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.kcp.Namespace, Name: ref.Name}, tmpl); err != nil {
		if apierrors.IsNotFound(err) {
			s.configTemplateErr = fmt.Sprintf("KairosConfigTemplate %s does not exist", ref.Name)
			return nil
		}
		return fmt.Errorf("reading KairosConfigTemplate %s: %w", ref.Name, err)
	}
	spec := tmpl.Spec.Template.Spec
	if spec.Distribution != "" && spec.Distribution != s.kcp.Spec.Distribution {
		s.configTemplateErr = fmt.Sprintf("KairosConfigTemplate %s has distribution %s but the control plane runs %s", ref.Name, spec.Distribution, s.kcp.Spec.Distribution)
		return nil
	}
	s.baseConfig = &spec
	return nil
}
