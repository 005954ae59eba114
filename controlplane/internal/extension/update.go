package extension

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
)

// The management cluster: the extension reads only the Machine being updated (the UpdateMachine
// request carries its desired spec, not status.nodeRef). Workload clusters are reached with
// their kubeconfig through the ClusterCache, so no management-cluster right is needed for them.
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get

// The Kairos operator's upgrade request, operator.kairos.io/v1alpha1 NodeOpUpgrade (namespaced),
// as in github.com/kairos-io/kairos-operator api/v1alpha1/nodeopupgrade_types.go (the fields used
// here are those test/simnode mirrors, at the commits test/simnode.KairosOperatorTypesCommit
// names). Its documentation: https://kairos.io/operator-docs/nodeop-upgrade/ .
var NodeOpUpgradeGVK = schema.GroupVersionKind{Group: "operator.kairos.io", Version: "v1alpha1", Kind: "NodeOpUpgrade"}

// Phases of a NodeOpUpgrade and of its per-node statuses.
const (
	PhaseCompleted = "Completed"
	phaseFailed    = "Failed"
)

// NodeOpUpgradeNamespace is where the NodeOpUpgrades are created in the workload cluster: the
// namespace of every example in the Kairos operator's documentation; it exists in every cluster.
const NodeOpUpgradeNamespace = "default"

// MachineAnnotation, on a NodeOpUpgrade, names the Machine (namespace/name) it upgrades.
const MachineAnnotation = "controlplane.cluster.x-k8s.io/kairos-machine"

// ImageAnnotation, on a NodeOpUpgrade, repeats the image it was created for (the name holds only
// a hash of it).
const ImageAnnotation = "controlplane.cluster.x-k8s.io/kairos-image"

// retryAfterSeconds is how often Cluster API asks again while a node upgrades. The operator needs
// minutes (drain, image pull, install to the passive partition, reboot); 15 s keeps the reported
// phase fresh without loading the workload API server.
const retryAfterSeconds = 15

// operatorRetrySeconds is how often Cluster API asks again while the workload cluster has no
// NodeOpUpgrade API: each call costs one discovery request there, and a user who just installed
// the operator sees the upgrade start within half a minute.
const operatorRetrySeconds = 30

// OperatorMissingMessage says that the workload cluster has no NodeOpUpgrade API and what to
// install. UpdateMachine waits with it (operatorWaitingMessage); the control plane quotes it when
// it finds the API missing after a failed update.
const OperatorMissingMessage = "the workload cluster has no NodeOpUpgrade API (operator.kairos.io/v1alpha1): " +
	"in-place upgrades of Kairos nodes need the Kairos operator in the workload cluster " +
	"(https://kairos.io/docs/upgrade/kubernetes/): install it with " +
	"`kubectl apply -k https://github.com/kairos-io/kairos-operator/config/default` " +
	"(air-gapped: mirror the operator's image and the Kairos upgrade images to a registry the nodes reach)"

// operatorWaitingMessage is UpdateMachine's answer while the NodeOpUpgrade API is missing. Cluster
// API's Machine controller shows it in the Machine's Updating condition ("In-place update in
// progress: ..."), where the user who has to install the operator looks.
var operatorWaitingMessage = fmt.Sprintf("waiting for the Kairos operator (the node is not touched until then): %s; "+
	"the upgrade starts by itself within %d s of the NodeOpUpgrade API being served", OperatorMissingMessage, operatorRetrySeconds)

// RemoteClients reaches workload clusters. The manager's ClusterCache satisfies it.
type RemoteClients interface {
	GetUncachedClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error)
}

// Handlers serve the three in-place update hooks.
type Handlers struct {
	// Client reads Machines in the management cluster.
	Client client.Reader
	// Remote reaches workload clusters. Uncached: the NodeOpUpgrade kind may not exist there (no
	// informer can be started for it), and each call makes at most three requests.
	Remote RemoteClients
}

// NodeOpUpgradeName is the name of the NodeOpUpgrade that moves machine to image: deterministic, so
// that a repeated UpdateMachine call (Cluster API calls it until it reports done, and again after
// a manager restart) finds the one it created instead of upgrading the node twice; and new for a
// new image, as the operator wants a new NodeOpUpgrade per run (its documentation: "create a new
// NodeOpUpgrade for a new run").
func NodeOpUpgradeName(machine *clusterv1.Machine, image string) string {
	sum := sha256.Sum256([]byte(machine.Namespace + "/" + machine.Name + "\n" + image))
	name := machine.Name
	if len(name) > 52 { // 52 + "-" + 10 hex: within 63, the label-value length Jobs named from it need
		name = strings.TrimRight(name[:52], "-.")
	}
	return name + "-" + hex.EncodeToString(sum[:])[:10]
}

// desiredImage reads spec.image of the desired KairosConfig (unstructured, so that the extension
// does not depend on the API version of the installed bootstrap provider).
func desiredImage(req *runtimehooksv1.UpdateMachineRequest) (string, error) {
	m, err := toMap(&req.Desired.BootstrapConfig)
	if err != nil {
		return "", err
	}
	if !isKairos(m, kairosConfigKind) {
		return "", fmt.Errorf("the bootstrap config is %s %s, not a Kairos KairosConfig", str(m, "apiVersion"), str(m, "kind"))
	}
	spec, _ := m["spec"].(map[string]any)
	return str(spec, imageField), nil
}

// UpdateMachine upgrades the Machine's node in place with the Kairos operator: one NodeOpUpgrade
// selecting that node by hostname (concurrency 1, stopOnFailure, upgradeActive), then it reports
// progress until the node runs the new version.
func (h *Handlers) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", req.Desired.Machine.Namespace+"/"+req.Desired.Machine.Name)
	failure := func(msg string) {
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(msg)
		resp.SetRetryAfterSeconds(0)
	}
	progress := func(msg string) {
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(msg)
		resp.SetRetryAfterSeconds(retryAfterSeconds)
	}
	// A missing operator is something the user fixes in the workload cluster, with nothing done
	// to the node yet: the hook waits for it instead of failing. Cluster API v1.14's Machine
	// controller (core/reconcilers/machine/machine_controller_inplace_update.go,
	// reconcileInPlaceUpdate) turns a Failure answer into a reconcile error: the Machine's
	// Updating condition says only "UpdateMachine hook failed: please check controller logs",
	// and controller-runtime requeues the Machine with per-item exponential backoff (5 ms
	// doubling up to 1000 s, pkg/controller/controller.go; only a reconcile without error
	// resets it, pkg/internal/controller/controller.go): once the operator was installed, the
	// update resumed at the next retry only, up to ~17 minutes later, while the control plane
	// told the user to change the spec or delete the Machine. A Success with
	// retryAfterSeconds is requeued at that interval (callUpdateMachineHook's hook cache) and
	// its message shown in the Updating condition. The REST mapper needs nothing: the
	// ClusterCache's (controller-runtime's dynamic RESTMapper, pkg/client/apiutil/restmapper.go)
	// asks the API server again, on every lookup, for a group version it has no mapping for,
	// so the next call finds the API once it is served.
	waitForOperator := func() {
		log.V(1).Info("The workload cluster has no NodeOpUpgrade API: waiting for the Kairos operator", "retryAfterSeconds", operatorRetrySeconds)
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(operatorWaitingMessage)
		resp.SetRetryAfterSeconds(operatorRetrySeconds)
	}

	image, err := desiredImage(req)
	if err != nil {
		failure(err.Error())
		return
	}
	if image == "" {
		failure("the desired KairosConfig has no spec.image: a Kairos node is upgraded in place by writing a new image")
		return
	}
	version := req.Desired.Machine.Spec.Version

	// The request has the desired spec only: the Node is in the Machine's status.
	machine := &clusterv1.Machine{}
	key := client.ObjectKey{Namespace: req.Desired.Machine.Namespace, Name: req.Desired.Machine.Name}
	if err := h.Client.Get(ctx, key, machine); err != nil {
		if apierrors.IsNotFound(err) {
			failure(fmt.Sprintf("Machine %s not found", key))
			return
		}
		log.Error(err, "Reading the Machine")
		progress("waiting to read the Machine from the management cluster")
		return
	}
	nodeName := machine.Status.NodeRef.Name
	if nodeName == "" {
		progress("waiting for the Machine's status.nodeRef: the node to upgrade is not known yet")
		return
	}
	clusterName := machine.Spec.ClusterName
	if clusterName == "" {
		clusterName = machine.Labels[clusterv1.ClusterNameLabel]
	}
	remote, err := h.Remote.GetUncachedClient(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: clusterName})
	if err != nil {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			log.Error(err, "Reaching the workload cluster")
		}
		progress("waiting for the workload cluster's API server to answer")
		return
	}

	name := NodeOpUpgradeName(machine, image)
	nou := &unstructured.Unstructured{}
	nou.SetGroupVersionKind(NodeOpUpgradeGVK)
	err = remote.Get(ctx, client.ObjectKey{Namespace: NodeOpUpgradeNamespace, Name: name}, nou)
	switch {
	case meta.IsNoMatchError(err) || isMissingResource(err):
		waitForOperator()
		return
	case apierrors.IsNotFound(err):
		// One upgrade of a node at a time: the desired image can change while an earlier
		// NodeOpUpgrade of the same Machine still runs (the control plane corrects a failed
		// update, or a reply got lost); a second one would reboot the node under the first.
		other, err := h.unfinishedUpgrade(ctx, remote, machine, name)
		if err != nil {
			log.Error(err, "Listing the NodeOpUpgrades of the Machine")
			progress(fmt.Sprintf("waiting to list the NodeOpUpgrades of node %s in the workload cluster", nodeName))
			return
		}
		if other != "" {
			progress(fmt.Sprintf("waiting for %s to finish before upgrading node %s to %s: one upgrade of a node at a time", other, nodeName, image))
			return
		}
		// The Node's boot ID now tells later whether it rebooted (outcome.go).
		node, ok := readNode(ctx, remote, nodeName)
		if !ok {
			progress(fmt.Sprintf("waiting to read Node %s in the workload cluster", nodeName))
			return
		}
		nou = newNodeOpUpgrade(name, machine, nodeName, image, node.Status.NodeInfo.BootID)
		if err := remote.Create(ctx, nou); err != nil {
			switch {
			case meta.IsNoMatchError(err) || isMissingResource(err):
				waitForOperator()
			case apierrors.IsAlreadyExists(err):
				progress(fmt.Sprintf("NodeOpUpgrade %s/%s upgrades node %s to %s", NodeOpUpgradeNamespace, name, nodeName, image))
			default:
				log.Error(err, "Creating the NodeOpUpgrade", "NodeOpUpgrade", name)
				progress(fmt.Sprintf("waiting to create NodeOpUpgrade %s/%s in the workload cluster", NodeOpUpgradeNamespace, name))
			}
			return
		}
		log.Info("Created a NodeOpUpgrade", "NodeOpUpgrade", name, "node", nodeName, "image", image)
		progress(fmt.Sprintf("NodeOpUpgrade %s/%s created: upgrading node %s to %s", NodeOpUpgradeNamespace, name, nodeName, image))
		return
	case err != nil:
		log.Error(err, "Reading the NodeOpUpgrade", "NodeOpUpgrade", name)
		progress(fmt.Sprintf("waiting to read NodeOpUpgrade %s/%s in the workload cluster", NodeOpUpgradeNamespace, name))
		return
	}

	if msg, failed := UpgradeFailure(nou, nodeName); failed {
		failure(msg)
		return
	}
	phase, _, _ := unstructured.NestedString(nou.Object, "status", "phase")
	if phase != PhaseCompleted {
		if phase == "" {
			phase = "not picked up by the operator yet"
		}
		progress(fmt.Sprintf("NodeOpUpgrade %s/%s upgrading node %s to %s: %s", NodeOpUpgradeNamespace, name, nodeName, image, phase))
		return
	}

	// The operator is done with the node: whether it runs what was asked, only the Node tells
	// (outcome.go).
	node, ok := readNode(ctx, remote, nodeName)
	if !ok {
		progress(fmt.Sprintf("NodeOpUpgrade %s/%s completed; waiting to read Node %s", NodeOpUpgradeNamespace, name, nodeName))
		return
	}
	switch o := CompletedOutcome(nou, node, version, image, time.Now()); {
	case o.Failure != "":
		failure(o.Failure)
	case !o.Done:
		progress(o.Waiting)
	default:
		resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
		resp.SetMessage(fmt.Sprintf("node %s runs %s from %s", nodeName, node.Status.NodeInfo.KubeletVersion, image))
		resp.SetRetryAfterSeconds(0)
	}
}

// readNode reads a workload Node; an error other than NotFound is logged, and either is a reason
// to ask again later.
func readNode(ctx context.Context, remote client.Client, name string) (*corev1.Node, bool) {
	node := &corev1.Node{}
	if err := remote.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		if !apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).Error(err, "Reading the Node", "Node", name)
		}
		return nil, false
	}
	return node, true
}

// UpgradeFailure tells whether a NodeOpUpgrade of the extension failed for a node and, if so,
// says so with what the node reported (its status message, or the operator's overall message when
// the node has none). The control plane reads it too, to show the node's reason where users look:
// Cluster API's Machine controller keeps a hook's failure message in its logs only.
func UpgradeFailure(nou *unstructured.Unstructured, nodeName string) (string, bool) {
	phase, _, _ := unstructured.NestedString(nou.Object, "status", "phase")
	nodePhase, _, _ := unstructured.NestedString(nou.Object, "status", "nodeStatuses", nodeName, "phase")
	if phase != phaseFailed && nodePhase != phaseFailed {
		return "", false
	}
	reported, _, _ := unstructured.NestedString(nou.Object, "status", "nodeStatuses", nodeName, "message")
	if reported == "" {
		reported, _, _ = unstructured.NestedString(nou.Object, "status", "message")
	}
	if reported == "" {
		reported = "no message"
	}
	image, _, _ := unstructured.NestedString(nou.Object, "spec", "image")
	return fmt.Sprintf("the Kairos operator failed to upgrade node %s to %s (NodeOpUpgrade %s/%s): the node reported: %q",
		nodeName, image, nou.GetNamespace(), nou.GetName(), reported), true
}

// unfinishedUpgrade names another NodeOpUpgrade of the Machine that is neither Completed nor
// Failed ("" when there is none). The Machine is found by the annotation the extension sets.
func (h *Handlers) unfinishedUpgrade(ctx context.Context, remote client.Client, machine *clusterv1.Machine, except string) (string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(NodeOpUpgradeGVK.GroupVersion().WithKind(NodeOpUpgradeGVK.Kind + "List"))
	if err := remote.List(ctx, list, client.InNamespace(NodeOpUpgradeNamespace)); err != nil {
		return "", fmt.Errorf("listing NodeOpUpgrades in %s: %w", NodeOpUpgradeNamespace, err)
	}
	for _, u := range list.Items {
		if u.GetName() == except || u.GetAnnotations()[MachineAnnotation] != machine.Namespace+"/"+machine.Name {
			continue
		}
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != PhaseCompleted && phase != phaseFailed {
			return fmt.Sprintf("NodeOpUpgrade %s/%s (image %s)", u.GetNamespace(), u.GetName(), u.GetAnnotations()[ImageAnnotation]), nil
		}
	}
	return "", nil
}

// isMissingResource tells whether err says the API server does not serve the resource (a
// NotFound with no object details: what a request to an unserved path returns when the client
// has no REST mapping to refuse it first).
func isMissingResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsNotFound(err) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// sameVersion compares Kubernetes versions by their release numbers: a Machine's version may be
// v1.37.0 or carry the distribution's build (v1.37.0+k3s1, v1.37.0+k0s.0), kubelets report
// v1.37.0+k3s1 (k3s) or v1.37.0+k0s (k0s).
func sameVersion(a, b string) bool {
	core := func(v string) string {
		v, _, _ = strings.Cut(v, "+")
		return strings.TrimPrefix(v, "v")
	}
	return core(a) == core(b)
}

func newNodeOpUpgrade(name string, machine *clusterv1.Machine, nodeName, image, bootID string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"image": image,
			// The Node by its hostname label, the Kubernetes well-known label kubelets set.
			"nodeSelector": map[string]any{"matchLabels": map[string]any{corev1.LabelHostname: nodeName}},
			"concurrency":  int64(1),
			// One node per NodeOpUpgrade: stop at its failure rather than retry elsewhere.
			"stopOnFailure": true,
			// Upgrade the active system (written to the passive partition, then booted), not recovery.
			"upgradeActive": true,
		},
	}}
	u.SetGroupVersionKind(NodeOpUpgradeGVK)
	u.SetNamespace(NodeOpUpgradeNamespace)
	u.SetName(name)
	u.SetLabels(map[string]string{clusterv1.ClusterNameLabel: machine.Spec.ClusterName})
	u.SetAnnotations(map[string]string{MachineAnnotation: machine.Namespace + "/" + machine.Name, ImageAnnotation: image, BootIDAnnotation: bootID})
	return u
}
