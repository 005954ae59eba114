package simnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// k0s: every controller manages an EtcdMember object (etcd.k0sproject.io/v1beta1, cluster
// scoped, named after the node). Setting spec.leave makes the member leave etcd; k0s then sets
// the Joined condition to False and reconcileStatus to Success, and keeps the object.
var (
	// EtcdMemberGVK is the kind of k0s' etcd member objects.
	EtcdMemberGVK = schema.GroupVersionKind{Group: "etcd.k0sproject.io", Version: "v1beta1", Kind: "EtcdMember"}
	// EtcdMemberListGVK is their list kind.
	EtcdMemberListGVK = EtcdMemberGVK.GroupVersion().WithKind("EtcdMemberList")
)

// k3s: servers of an embedded-etcd cluster carry these labels and annotations on their Node;
// annotating a Node with RemoveAnnotation=true removes its member, after which k3s records the
// member name in RemovedNodeNameAnnotation and drops the name and address annotations.
// Deleting the Node removes its member too (k3s holds the Node with EtcdFinalizer until then).
const (
	K3sEtcdRoleLabel             = "node-role.kubernetes.io/etcd"
	K3sNodeNameAnnotation        = "etcd.k3s.cattle.io/node-name"
	K3sNodeAddressAnnotation     = "etcd.k3s.cattle.io/node-address"
	K3sRemoveAnnotation          = "etcd.k3s.cattle.io/remove"
	K3sRemovedNodeNameAnnotation = "etcd.k3s.cattle.io/removed-node-name"
	K3sEtcdFinalizer             = "wrangler.cattle.io/managed-etcd-controller"
)

// etcdMemberCRD is the EtcdMember CustomResourceDefinition in the shape k0s installs.
func etcdMemberCRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	condition := apiextensionsv1.JSONSchemaProps{
		Type:     "object",
		Required: []string{"type", "status"},
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"type":               {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Joined"`)}}},
			"status":             {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"True"`)}, {Raw: []byte(`"False"`)}, {Raw: []byte(`"Unknown"`)}}},
			"lastTransitionTime": {Type: "string", Format: "date-time"},
			"message":            str,
		},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "etcdmembers.etcd.k0sproject.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: EtcdMemberGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "etcdmembers", Singular: "etcdmember", Kind: "EtcdMember", ListKind: "EtcdMemberList",
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: EtcdMemberGVK.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Peer Address", Type: "string", JSONPath: ".status.peerAddress"},
					{Name: "Member ID", Type: "string", JSONPath: ".status.memberID"},
					{Name: "Joined", Type: "string", JSONPath: `.status.conditions[?(@.type=="Joined")].status`},
					{Name: "Reconcile Status", Type: "string", JSONPath: ".status.reconcileStatus"},
				},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"apiVersion": str, "kind": str, "metadata": {Type: "object"},
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"leave": {Type: "boolean"},
						}},
						"status": {Type: "object", Required: []string{"peerAddress", "memberID"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"peerAddress":     str,
							"memberID":        {Type: "string", Pattern: "^[a-fA-F0-9]+$"},
							"reconcileStatus": str,
							"message":         str,
							"conditions": {
								Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &condition},
								XListType: ptr.To("map"), XListMapKeys: []string{"type"},
							},
						}},
					},
				}},
			}},
		},
	}
}

// ensureEtcdMemberCRD installs the EtcdMember CRD once, as the first k0s controller does.
func (c *Cluster) ensureEtcdMemberCRD(ctx context.Context) error {
	c.crdOnce.Do(func() {
		crd := etcdMemberCRD()
		if err := c.client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			c.crdErr = err
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.client.Get(ctx, client.ObjectKeyFromObject(crd), got); err == nil {
				for _, cond := range got.Status.Conditions {
					if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
						return
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.crdErr = fmt.Errorf("CRD %s not established", crd.Name)
	})
	return c.crdErr
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// joinK0sEtcd publishes a k0s controller's EtcdMember, as k0s does when a controller starts
// (re-joining resets spec.leave to false): named after the node, with the member's real ID and
// peer address.
func (c *Cluster) joinK0sEtcd(ctx context.Context, e *etcdServer) error {
	if err := c.ensureEtcdMemberCRD(ctx); err != nil {
		return err
	}
	members, err := c.etcdMembers(ctx)
	if err != nil {
		return fmt.Errorf("reading etcd's members: %w", err)
	}
	memberID := ""
	for _, m := range members {
		if m.Name == e.name {
			memberID = m.MemberID
		}
	}
	if memberID == "" {
		return fmt.Errorf("etcd has no member %s yet", e.name)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(EtcdMemberGVK)
	u.SetName(e.name)
	_ = unstructured.SetNestedField(u.Object, false, "spec", "leave")
	err = c.client.Create(ctx, u)
	if apierrors.IsAlreadyExists(err) {
		if err = c.client.Get(ctx, client.ObjectKey{Name: e.name}, u); err == nil {
			_ = unstructured.SetNestedField(u.Object, false, "spec", "leave")
			err = c.client.Update(ctx, u)
		}
	}
	if err != nil {
		return fmt.Errorf("publishing EtcdMember %s: %w", e.name, err)
	}
	_ = unstructured.SetNestedMap(u.Object, map[string]any{
		"peerAddress": e.ip,
		"memberID":    memberID,
		"conditions": []any{map[string]any{
			"type": "Joined", "status": "True", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
		}},
	}, "status")
	if err := c.client.Status().Update(ctx, u); err != nil {
		return fmt.Errorf("publishing the status of EtcdMember %s: %w", e.name, err)
	}
	return nil
}

// reconcileMembership honours leave requests, as k0s' etcd member controller and k3s' managed
// etcd controller do.
func (c *Cluster) reconcileMembership(ctx context.Context) {
	if c.leavesHeld.Load() {
		return
	}
	if c.distribution == render.K0s {
		c.reconcileK0sMembers(ctx)
		return
	}
	if c.k3sEtcd {
		c.reconcileK3sMembers(ctx)
	}
}

func (c *Cluster) reconcileK0sMembers(ctx context.Context) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(EtcdMemberListGVK)
	if err := c.client.List(ctx, list); err != nil {
		return // no controller has installed the CRD yet
	}
	for i := range list.Items {
		u := &list.Items[i]
		leave, _, _ := unstructured.NestedBool(u.Object, "spec", "leave")
		if !leave {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if joinedStatus(conds) == "False" {
			continue
		}
		// k0s' leader removes the member from etcd, which needs quorum; until it can, it
		// reports the failure and retries.
		if err := c.removeEtcdMember(ctx, u.GetName()); err != nil {
			_ = unstructured.SetNestedField(u.Object, "Failed", "status", "reconcileStatus")
			_ = unstructured.SetNestedField(u.Object, err.Error(), "status", "message")
			_ = c.client.Status().Update(ctx, u)
			continue
		}
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
			"type": "Joined", "status": "False", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339),
			"message": "member left the etcd cluster",
		}}, "status", "conditions")
		_ = unstructured.SetNestedField(u.Object, "Success", "status", "reconcileStatus")
		_ = unstructured.SetNestedField(u.Object, "", "status", "message")
		_ = c.client.Status().Update(ctx, u)
	}
}

func joinedStatus(conds []any) string {
	for _, raw := range conds {
		if m, ok := raw.(map[string]any); ok && m["type"] == "Joined" {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

func (c *Cluster) reconcileK3sMembers(ctx context.Context) {
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes, client.HasLabels{K3sEtcdRoleLabel}); err != nil {
		return
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ann := n.Annotations
		if ann == nil {
			ann = map[string]string{}
		}
		if !n.DeletionTimestamp.IsZero() {
			if !containsString(n.Finalizers, K3sEtcdFinalizer) {
				continue
			}
			if name := ann[K3sNodeNameAnnotation]; name != "" && ann[K3sRemovedNodeNameAnnotation] == "" {
				if err := c.removeEtcdMember(ctx, name); err != nil {
					continue // k3s keeps the finalizer and retries
				}
			}
			n.Finalizers = removeString(n.Finalizers, K3sEtcdFinalizer)
			_ = c.client.Update(ctx, n)
			continue
		}
		request, requested := ann[K3sRemoveAnnotation]
		if !requested {
			continue
		}
		if removed, ok := ann[K3sRemovedNodeNameAnnotation]; ok {
			if current, ok := ann[K3sNodeNameAnnotation]; ok && current != removed {
				// The node re-joined under a new member name: reset the removal request.
				delete(n.Annotations, K3sRemovedNodeNameAnnotation)
				n.Annotations[K3sRemoveAnnotation] = "false"
				_ = c.client.Update(ctx, n)
			}
			continue
		}
		if strings.ToLower(request) != "true" {
			continue
		}
		name, ok := ann[K3sNodeNameAnnotation]
		if !ok || ann[K3sNodeAddressAnnotation] == "" {
			continue // k3s reports an error and retries
		}
		if err := c.removeEtcdMember(ctx, name); err != nil {
			continue // k3s reports an error and retries
		}
		n.Annotations[K3sRemovedNodeNameAnnotation] = name
		delete(n.Annotations, K3sNodeNameAnnotation)
		delete(n.Annotations, K3sNodeAddressAnnotation)
		_ = c.client.Update(ctx, n)
	}
}

func removeString(list []string, s string) []string {
	out := list[:0]
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}

// LeaveRequested tells whether the distribution is asked to remove the etcd member of a node:
// k0s EtcdMember spec.leave, or the k3s remove annotation on the node's Node.
func (c *Cluster) LeaveRequested(ctx context.Context, nodeName string) (bool, error) {
	if c.distribution == render.K0s {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(EtcdMemberGVK)
		if err := c.client.Get(ctx, client.ObjectKey{Name: nodeName}, u); err != nil {
			return false, fmt.Errorf("reading EtcdMember %s: %w", nodeName, err)
		}
		leave, _, _ := unstructured.NestedBool(u.Object, "spec", "leave")
		return leave, nil
	}
	n := &corev1.Node{}
	if err := c.client.Get(ctx, client.ObjectKey{Name: nodeName}, n); err != nil {
		return false, fmt.Errorf("reading Node %s: %w", nodeName, err)
	}
	return strings.ToLower(n.Annotations[K3sRemoveAnnotation]) == "true", nil
}
