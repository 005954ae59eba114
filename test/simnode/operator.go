package simnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// The Kairos operator (github.com/kairos-io/kairos-operator) upgrades Kairos nodes from inside a
// workload cluster: a NodeOpUpgrade (operator.kairos.io/v1alpha1, namespaced) names an upgrade image
// and the Nodes to upgrade; the operator turns it into a NodeOp that cordons and drains each node,
// runs `kairos-agent upgrade --source dir:/` in a Job of the upgrade image and reboots the node
// (internal/controller/nodeopupgrade_controller.go). Its Go module is not served here, so the
// simulation mirrors the part of the API it uses by hand, from these files of the repository:
const (
	// KairosOperatorTypesCommit is the commit of api/v1alpha1/nodeopupgrade_types.go mirrored.
	KairosOperatorTypesCommit = "0e76a6f25438974e1bc543e93bf19590d263c63d"
	// KairosOperatorNodeStatusCommit is the commit of api/v1alpha1/nodeop_types.go (NodeStatus).
	KairosOperatorNodeStatusCommit = "0878f24405d7cabdff7a0a374bfb5daf44dcc06d"
	// KairosOperatorRelease is the release whose behaviour the simulation follows
	// (ba610ee, 2026-08-06): internal/controller/nodeop_controller.go, whose reboot pod marks
	// the reboot done before it reboots the node and ends once the node runs again, whatever
	// image it booted; cmd/node-labeler/labeler.go and the DaemonSet
	// (internal/controller/nodelabeler_daemonset_controller.go) that re-labels every Kairos node
	// every 60 s and when its pod starts, so after each boot.
	KairosOperatorRelease = "v0.1.3"
)

// NodeOpUpgradeGVK is the kind of the Kairos operator's upgrade requests.
var NodeOpUpgradeGVK = schema.GroupVersionKind{Group: "operator.kairos.io", Version: "v1alpha1", Kind: "NodeOpUpgrade"}

// Phases of a NodeOpUpgrade and of each of its nodes (NodeOpUpgradeStatus.Phase, NodeStatus.Phase).
const (
	NodeOpPhasePending   = "Pending"
	NodeOpPhaseRunning   = "Running"
	NodeOpPhaseCompleted = "Completed"
	NodeOpPhaseFailed    = "Failed"
)

// operatorPollInterval is how often the simulated operator looks at NodeOpUpgrades (the real one
// watches them and requeues every 10-30 s).
const operatorPollInterval = time.Second

// NodeOpUpgradeCRD is the NodeOpUpgrade CustomResourceDefinition with the fields the simulation
// mirrors: spec image, nodeSelector, concurrency, stopOnFailure, upgradeActive, upgradeRecovery,
// force; status phase, nodeStatuses (NodeStatus phase, message, lastUpdated: the simulation runs
// no Jobs, so no jobName), message, lastUpdated. Fields of the real CRD left out (imagePullSecrets,
// debug, uncordonOnFailure, status.nodeOpName) are pruned by the API server, as unknown fields are.
func NodeOpUpgradeCRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	boolean := apiextensionsv1.JSONSchemaProps{Type: "boolean"}
	dateTime := apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}
	nodeStatus := apiextensionsv1.JSONSchemaProps{
		Type: "object", Required: []string{"phase"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{"phase": str, "message": str, "lastUpdated": dateTime},
	}
	selector := apiextensionsv1.JSONSchemaProps{
		Type: "object", XMapType: ptr.To("atomic"),
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"matchLabels": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &str}},
			"matchExpressions": {Type: "array", XListType: ptr.To("atomic"), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Required: []string{"key", "operator"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"key": str, "operator": str,
					"values": {Type: "array", XListType: ptr.To("atomic"), Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
				},
			}}},
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "nodeopupgrades.operator.kairos.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: NodeOpUpgradeGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "nodeopupgrades", Singular: "nodeopupgrade", Kind: "NodeOpUpgrade", ListKind: "NodeOpUpgradeList",
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: NodeOpUpgradeGVK.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": str, "kind": str, "metadata": {Type: "object"},
						"spec": {Type: "object", Required: []string{"image"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"image":           str,
							"nodeSelector":    selector,
							"concurrency":     {Type: "integer", Format: "int32", Minimum: ptr.To(0.0), Default: &apiextensionsv1.JSON{Raw: []byte("0")}},
							"stopOnFailure":   boolean,
							"upgradeActive":   boolean,
							"upgradeRecovery": boolean,
							"force":           boolean,
						}},
						"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"phase":        str,
							"nodeStatuses": {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Schema: &nodeStatus}},
							"message":      str,
							"lastUpdated":  dateTime,
						}},
					},
				}},
			}},
		},
	}
}

// kairosOperator is the simulated operator of one workload cluster.
type kairosOperator struct {
	c      *Cluster
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	runs map[types.UID]*upgradeRun
}

// upgradeRun is the operator's state of one NodeOpUpgrade.
type upgradeRun struct {
	nodes []string // target Node names, in the order they are started
	state map[string]*nodeRunState
}

type nodeRunState struct {
	phase, message string
	updated        metav1.Time
}

// InstallKairosOperator installs the Kairos operator in the workload cluster, as a user who
// deploys it (kubectl apply -k .../kairos-operator/config/default) does: it applies the
// NodeOpUpgrade CRD to the cluster's API server and returns once the operator runs, which the
// cluster starts when the CRD is established (watchForKairosOperator), as for any other client
// that applies it. A workload cluster has no operator until then. Calling it again does nothing.
// The operator stops with the cluster.
//
// For each NodeOpUpgrade it selects the Nodes by spec.nodeSelector (all Nodes when empty), at most
// spec.concurrency at a time (0: all), and stops starting nodes after a failure when
// spec.stopOnFailure. On each node, unless spec.force, a node already at the image's version triple
// (KAIROS_VERSION-<prefix><software version> of /etc/kairos-release) is Completed at once; otherwise
// it cordons the Node, writes the recovery image when spec.upgradeRecovery, and when
// spec.upgradeActive (default true) upgrades the node and reboots it (Node.Upgrade). As with the
// real operator (KairosOperatorRelease), a node that runs Kubernetes again after the reboot is
// uncordoned and Completed, whichever image it booted: one that GRUB's boot assessment sent back to
// its previous image too. Only the Node tells (its kubelet version, and the labels below). A node
// whose new image boots without its distribution never runs the reboot pod again: it stays
// Running, cordoned. An upgrade that cannot start (not an image) is Failed.
//
// The operator's node labeler runs too: every running node's Node carries kairos.io/managed,
// kairos.io/boot-state (active, or passive after a fallback), kairos.io/software-version-prefix,
// kairos.io/software-version and kairos.io/release as labels (values sanitised as the labeler
// does) and kairos.io/version as an annotation, from its /etc/kairos-release; the simulation
// updates them each time it looks (operatorPollInterval) rather than each minute.
func (c *Cluster) InstallKairosOperator(ctx context.Context) error {
	c.mu.Lock()
	installed := c.operator != nil
	c.mu.Unlock()
	if installed {
		return nil
	}
	crd := NodeOpUpgradeCRD()
	if err := c.client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("installing the NodeOpUpgrade CRD: %w", err)
	}
	// The operator's Deployment rolls out: the cluster starts the operator once the CRD is
	// established, within one watch event.
	select {
	case <-c.operatorStarted:
		return nil
	case <-c.stopping:
		return errors.New("the workload cluster stopped before the Kairos operator started")
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return errors.New("the Kairos operator did not start within 30 s of its NodeOpUpgrade CRD being applied (is the CRD established?)")
	}
}

// KairosOperatorManifests is what a user applies to a simulated workload cluster to deploy the
// simulated Kairos operator (kubectl apply -f): the NodeOpUpgrade CRD (NodeOpUpgradeCRD), in
// YAML. The operator itself has no manifest here, as no kubelet of the simulation runs pods: the
// cluster starts it once the CRD is established, as the real operator's Deployment would start
// beside its CRD. The real operator's manifests
// (kubectl apply -k https://github.com/kairos-io/kairos-operator/config/default) work as well:
// their NodeOpUpgrade CRD starts the simulated operator, and their Deployment never runs.
func KairosOperatorManifests() ([]byte, error) {
	crd := NodeOpUpgradeCRD()
	crd.APIVersion, crd.Kind = apiextensionsv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
	data, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	header := "# The simulated Kairos operator (kairos-operator " + KairosOperatorRelease + ", test/simnode/operator.go): its\n" +
		"# NodeOpUpgrade CRD. A simulated workload cluster starts the operator once this CRD is established.\n"
	return append([]byte(header), data...), nil
}

// watchForKairosOperator starts the cluster's Kairos operator once the NodeOpUpgrade CRD is
// established in its API server, whoever applied it (InstallKairosOperator, a user's kubectl
// apply of the operator's manifests): a real cluster runs the operator once its manifests are
// applied, and the CRD is the part of them the simulation can see (its Deployment would need a
// kubelet that runs pods). It watches the one CRD by name, so a cluster without the operator
// costs one idle watch; it follows the API server through restarts (a rebooting single
// control-plane node) until the cluster stops.
func (c *Cluster) watchForKairosOperator(ctx context.Context) {
	wc, err := client.NewWithWatch(c.config, client.Options{Scheme: c.client.Scheme()})
	if err != nil {
		c.reg.log.Error(err, "Cannot watch for the Kairos operator's CRD: the operator never starts", "endpoint", c.endpoint)
		return
	}
	name := NodeOpUpgradeCRD().Name
	for ctx.Err() == nil {
		if c.watchCRDOnce(ctx, wc, name) {
			c.startKairosOperator()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watchCRDOnce watches the CRD name until it is established (true) or the watch ends (false).
// A watch without a resource version starts with the object as it is, so a CRD applied before
// the watch began is seen too.
func (c *Cluster) watchCRDOnce(ctx context.Context, wc client.WithWatch, name string) bool {
	timeout := int64(300) // a fresh watch now and then, should a connection hang unnoticed
	w, err := wc.Watch(ctx, &apiextensionsv1.CustomResourceDefinitionList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{TimeoutSeconds: &timeout},
	})
	if err != nil {
		return false // the API server is unavailable: the next try
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		crd, ok := ev.Object.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || ev.Type == watch.Deleted {
			continue
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// startKairosOperator starts the cluster's operator, once, unless the cluster stopped.
func (c *Cluster) startKairosOperator() {
	octx, cancel := context.WithCancel(context.Background())
	op := &kairosOperator{c: c, cancel: cancel, runs: map[types.UID]*upgradeRun{}}
	c.mu.Lock()
	if c.operator != nil || c.stopped {
		c.mu.Unlock()
		cancel()
		return
	}
	c.operator = op
	c.mu.Unlock()
	c.reg.log.Info("Kairos operator started: its NodeOpUpgrade CRD is established", "endpoint", c.endpoint)
	op.wg.Add(1)
	go func() {
		defer op.wg.Done()
		for {
			op.reconcileAll(octx)
			select {
			case <-octx.Done():
				return
			case <-time.After(operatorPollInterval):
			}
		}
	}()
	close(c.operatorStarted)
}

func (op *kairosOperator) stop() {
	op.cancel()
	op.wg.Wait()
}

func (op *kairosOperator) reconcileAll(ctx context.Context) {
	op.labelNodes(ctx)
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(NodeOpUpgradeGVK.GroupVersion().WithKind("NodeOpUpgradeList"))
	if err := op.c.client.List(ctx, list); err != nil {
		return // the API server is unavailable (a rebooting single control-plane node): next round
	}
	for i := range list.Items {
		op.reconcile(ctx, &list.Items[i])
	}
}

// nodeOpUpgradeSpec is the mirrored spec.
type nodeOpUpgradeSpec struct {
	Image           string                `json:"image"`
	NodeSelector    *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	Concurrency     int32                 `json:"concurrency,omitempty"`
	StopOnFailure   *bool                 `json:"stopOnFailure,omitempty"`
	UpgradeActive   *bool                 `json:"upgradeActive,omitempty"`
	UpgradeRecovery *bool                 `json:"upgradeRecovery,omitempty"`
	Force           *bool                 `json:"force,omitempty"`
}

func (op *kairosOperator) reconcile(ctx context.Context, u *unstructured.Unstructured) {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	if phase == NodeOpPhaseCompleted || phase == NodeOpPhaseFailed {
		op.mu.Lock()
		delete(op.runs, u.GetUID())
		op.mu.Unlock()
		return
	}
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	data, _ := json.Marshal(raw)
	var spec nodeOpUpgradeSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return
	}

	op.mu.Lock()
	run := op.runs[u.GetUID()]
	op.mu.Unlock()
	if run == nil {
		selector := labels.Everything()
		if spec.NodeSelector != nil {
			s, err := metav1.LabelSelectorAsSelector(spec.NodeSelector)
			if err != nil {
				op.writeStatus(ctx, u, NodeOpPhaseFailed, "invalid nodeSelector: "+err.Error(), nil)
				return
			}
			selector = s
		}
		nodes := &corev1.NodeList{}
		if err := op.c.client.List(ctx, nodes, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return
		}
		run = &upgradeRun{state: map[string]*nodeRunState{}}
		for _, n := range nodes.Items {
			run.nodes = append(run.nodes, n.Name)
			run.state[n.Name] = &nodeRunState{phase: NodeOpPhasePending, updated: metav1.Now()}
		}
		op.mu.Lock()
		op.runs[u.GetUID()] = run
		op.mu.Unlock()
	}

	op.mu.Lock()
	running, failed := 0, false
	for _, s := range run.state {
		switch s.phase {
		case NodeOpPhaseRunning:
			running++
		case NodeOpPhaseFailed:
			failed = true
		}
	}
	stopped := failed && ptr.Deref(spec.StopOnFailure, false)
	var start []string
	if !stopped {
		for _, name := range run.nodes {
			if spec.Concurrency > 0 && running+len(start) >= int(spec.Concurrency) {
				break
			}
			if run.state[name].phase == NodeOpPhasePending {
				start = append(start, name)
			}
		}
	}
	for _, name := range start {
		run.state[name].phase, run.state[name].message, run.state[name].updated = NodeOpPhaseRunning, "upgrading", metav1.Now()
	}
	op.mu.Unlock()
	for _, name := range start {
		op.wg.Add(1)
		go func() {
			defer op.wg.Done()
			phase, message := op.upgradeNode(ctx, name, spec)
			op.mu.Lock()
			run.state[name].phase, run.state[name].message, run.state[name].updated = phase, message, metav1.Now()
			op.mu.Unlock()
		}()
	}

	// The overall phase, as the operator's NodeOp reports it.
	op.mu.Lock()
	pending, running, completed, failedCount := 0, 0, 0, 0
	statuses := map[string]any{}
	for name, s := range run.state {
		switch s.phase {
		case NodeOpPhasePending:
			pending++
		case NodeOpPhaseRunning:
			running++
		case NodeOpPhaseCompleted:
			completed++
		case NodeOpPhaseFailed:
			failedCount++
		}
		st := map[string]any{"phase": s.phase, "lastUpdated": s.updated.UTC().Format(time.RFC3339)}
		if s.message != "" {
			st["message"] = s.message
		}
		statuses[name] = st
	}
	op.mu.Unlock()
	overall, message := NodeOpPhasePending, "Upgrade operation is pending"
	halted := failedCount > 0 && ptr.Deref(spec.StopOnFailure, false)
	switch {
	case running > 0 || (pending > 0 && !halted && completed+failedCount > 0):
		overall, message = NodeOpPhaseRunning, "Upgrade operation is running"
	case pending > 0 && !halted:
		// Nothing started yet.
	case failedCount > 0:
		overall, message = NodeOpPhaseFailed, "Upgrade operation failed"
	default:
		overall, message = NodeOpPhaseCompleted, "Upgrade operation completed successfully"
	}
	op.writeStatus(ctx, u, overall, message, statuses)
}

// writeStatus writes the NodeOpUpgrade's status when it changed.
func (op *kairosOperator) writeStatus(ctx context.Context, u *unstructured.Unstructured, phase, message string, statuses map[string]any) {
	oldPhase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	oldMessage, _, _ := unstructured.NestedString(u.Object, "status", "message")
	oldStatuses, _, _ := unstructured.NestedMap(u.Object, "status", "nodeStatuses")
	if statuses == nil {
		statuses = map[string]any{}
	}
	if oldPhase == phase && oldMessage == message && reflect.DeepEqual(phasesOf(oldStatuses), phasesOf(statuses)) {
		return
	}
	status := map[string]any{"phase": phase, "message": message, "lastUpdated": metav1.Now().UTC().Format(time.RFC3339)}
	if len(statuses) > 0 {
		status["nodeStatuses"] = statuses
	}
	u = u.DeepCopy()
	_ = unstructured.SetNestedMap(u.Object, status, "status")
	_ = op.c.client.Status().Update(ctx, u) // a conflict or an unavailable API server: next round
}

// phasesOf reduces node statuses to what tells a change (phase and message).
func phasesOf(statuses map[string]any) map[string]string {
	out := map[string]string{}
	for name, raw := range statuses {
		if m, ok := raw.(map[string]any); ok {
			p, _ := m["phase"].(string)
			msg, _ := m["message"].(string)
			out[name] = p + "\x00" + msg
		}
	}
	return out
}

// upgradeNode runs the upgrade on one node and returns its final phase and message.
func (op *kairosOperator) upgradeNode(ctx context.Context, name string, spec nodeOpUpgradeSpec) (string, string) {
	n := op.c.simNode(name)
	if n == nil {
		return NodeOpPhaseFailed, "no simulated Kairos node runs Node " + name
	}
	target, err := ParseImage(spec.Image)
	if err != nil {
		// The upgrade Job's pod cannot start: the image is not one.
		return NodeOpPhaseFailed, "pulling the upgrade image: " + err.Error()
	}
	recovery := ptr.Deref(spec.UpgradeRecovery, false)
	active := ptr.Deref(spec.UpgradeActive, true)
	if !ptr.Deref(spec.Force, false) && !recovery {
		// The upgrade preflight: the host's /etc/kairos-release against the image's.
		if cur, err := ParseImage(n.RunningImage()); err == nil && cur.versionTriple() == target.versionTriple() {
			return NodeOpPhaseCompleted, "node is already at " + target.versionTriple()
		}
	}
	if err := retryFor(ctx, 2*time.Minute, func() error { return op.c.setUnschedulable(ctx, name, true) }); err != nil {
		return NodeOpPhaseFailed, "cordoning the node: " + err.Error()
	}
	if recovery {
		if err := n.UpgradeRecovery(spec.Image); err != nil {
			return NodeOpPhaseFailed, err.Error()
		}
	}
	if active {
		if err := n.Upgrade(ctx, spec.Image); err != nil {
			var bf *BootFailure
			var df *DistributionFailure
			switch {
			case errors.As(err, &bf):
				// kairos-agent wrote the image (the Job completed), the reboot pod marked the
				// reboot done and rebooted the node, which came back on its previous image and
				// ran the pod again: done, for the operator.
			case errors.As(err, &df):
				// The new image runs without its distribution, so without a kubelet: the reboot
				// pod never runs again.
				return NodeOpPhaseRunning, "Job completed, waiting for the node to come back from its reboot"
			default:
				return NodeOpPhaseFailed, err.Error()
			}
		}
	}
	for op.c.upgradesHeld.Load() {
		select {
		case <-ctx.Done():
			return NodeOpPhaseRunning, "Job and reboot completed, the operator stopped before reporting the node done"
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := retryFor(ctx, 2*time.Minute, func() error { return op.c.setUnschedulable(ctx, name, false) }); err != nil {
		return NodeOpPhaseFailed, "uncordoning the node: " + err.Error()
	}
	return NodeOpPhaseCompleted, "Job and reboot completed successfully"
}

// Node labels and annotation of the operator's node labeler (cmd/node-labeler/labeler.go).
const (
	NodeLabelKairosManaged      = "kairos.io/managed"
	NodeLabelBootState          = "kairos.io/boot-state"
	NodeLabelSoftwareVersion    = "kairos.io/software-version"
	NodeLabelSoftwarePrefix     = "kairos.io/software-version-prefix"
	NodeLabelRelease            = "kairos.io/release"
	NodeAnnotationKairosVersion = "kairos.io/version"
	nodeLabelerBootStateActive  = "active"
	nodeLabelerBootStatePassive = "passive"
)

// invalidLabelChars are what the node labeler replaces with "-" in label values.
var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9\-_.]`)

// labelNodes is the node labeler's sync of every running node of the cluster: it patches a
// Node only when something changed.
func (op *kairosOperator) labelNodes(ctx context.Context) {
	for _, n := range op.c.reg.Nodes() {
		if n.Cluster() != op.c || n.Status().Phase != PhaseRunning || n.Name() == "" {
			continue
		}
		rel := n.kairosRelease()
		if rel["KAIROS_VERSION"] == "" {
			continue // not a Kairos node: the labeler leaves it alone
		}
		state := nodeLabelerBootStateActive
		if n.BootAssessment().UpgradeFailure {
			state = nodeLabelerBootStatePassive
		}
		want := map[string]string{NodeLabelKairosManaged: "true", NodeLabelBootState: state}
		for key, label := range map[string]string{
			"KAIROS_SOFTWARE_VERSION": NodeLabelSoftwareVersion, "KAIROS_SOFTWARE_VERSION_PREFIX": NodeLabelSoftwarePrefix, "KAIROS_RELEASE": NodeLabelRelease,
		} {
			if v := strings.Trim(invalidLabelChars.ReplaceAllString(rel[key], "-"), "-_."); v != "" {
				want[label] = v
			}
		}
		node := &corev1.Node{}
		if err := op.c.client.Get(ctx, client.ObjectKey{Name: n.Name()}, node); err != nil {
			continue
		}
		changed := node.Annotations[NodeAnnotationKairosVersion] != rel["KAIROS_VERSION"]
		for k, v := range want {
			changed = changed || node.Labels[k] != v
		}
		if !changed {
			continue
		}
		patch := client.MergeFrom(node.DeepCopy())
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		for k, v := range want {
			node.Labels[k] = v
		}
		node.Annotations[NodeAnnotationKairosVersion] = rel["KAIROS_VERSION"]
		_ = op.c.client.Patch(ctx, node, patch) // next round when the API server does not answer
	}
}

// simNode returns the simulated node that runs the cluster's Node name.
func (c *Cluster) simNode(name string) *Node {
	for _, n := range c.reg.Nodes() {
		if n.Cluster() == c && n.Name() == name && n.Status().Phase != PhaseStopped {
			return n
		}
	}
	return nil
}

func (c *Cluster) setUnschedulable(ctx context.Context, name string, unschedulable bool) error {
	node := &corev1.Node{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	if node.Spec.Unschedulable == unschedulable {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = unschedulable
	return c.client.Patch(ctx, node, patch)
}
