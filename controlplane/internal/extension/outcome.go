package extension

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// What a completed NodeOpUpgrade means. The Kairos operator reports a node Completed once the node
// runs again after its reboot, whichever image it booted: its reboot pod marks the reboot done
// before it reboots the node and ends when it runs again (kairos-operator v0.1.3,
// internal/controller/nodeop_controller.go). When Kairos' boot assessment sent the node back to its
// previous image, only the Node tells: its kubelet reports the previous version from a new boot, and
// the operator's node labeler (cmd/node-labeler, a DaemonSet on every Kairos node that syncs when it
// starts and every 60 s) labels it with the boot state and the Kairos release it runs.

// Node labels and annotation of the Kairos operator's node labeler (cmd/node-labeler/labeler.go).
const (
	labelBootState          = "kairos.io/boot-state"
	labelSoftwareVersion    = "kairos.io/software-version"
	annotationKairosVersion = "kairos.io/version"
	bootStatePassive        = "passive"
)

// BootIDAnnotation, on a NodeOpUpgrade, is the Node's boot ID when the extension created it: a Node
// that reports another one has rebooted since.
const BootIDAnnotation = "controlplane.cluster.x-k8s.io/kairos-boot-id"

// labelerLag is how long after a node was reported done its labeler labels may still describe the
// boot before (the labeler syncs every 60 s; its pod starts again after the reboot).
const labelerLag = 90 * time.Second

// invalidLabelChars are what the node labeler replaces with "-" in label values.
var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9\-_.]`)

func labelValue(s string) string {
	return strings.Trim(invalidLabelChars.ReplaceAllString(s, "-"), "-_.")
}

// Outcome is where the upgrade of a node stands once its NodeOpUpgrade is Completed.
type Outcome struct {
	// Done: the node runs what was asked. Failure, when not empty: it came back on its previous
	// image. Otherwise Waiting says what for.
	Done             bool
	Failure, Waiting string
}

// CompletedOutcome judges the Node of a Completed NodeOpUpgrade against the version (of the
// Machine, "" when not checked) and the image it was asked to run, at now.
func CompletedOutcome(nou *unstructured.Unstructured, node *corev1.Node, version, image string, now time.Time) Outcome {
	ref := fmt.Sprintf("NodeOpUpgrade %s/%s", nou.GetNamespace(), nou.GetName())
	kubelet := node.Status.NodeInfo.KubeletVersion
	completed := completedAt(nou, node.Name)
	settled := !completed.IsZero() && now.Sub(completed) >= labelerLag
	// Without the boot ID of before (a NodeOpUpgrade of an earlier release of the extension),
	// time tells: the operator reports a node done only after its reboot.
	rebooted := settled
	if before := nou.GetAnnotations()[BootIDAnnotation]; before != "" {
		rebooted = node.Status.NodeInfo.BootID != before
	}
	fellBack := func(what string) Outcome {
		return Outcome{Failure: fmt.Sprintf("node %s came back from its reboot on its previous image (%s; %s reports the upgrade done: "+
			"the Kairos operator does not check what the node booted): the image %s did not come up, so Kairos' boot assessment booted the fallback entry; "+
			"the node's journal says why (journalctl -u %s)", node.Name, what, ref, image, render.BootAssessmentUnit)}
	}

	if version != "" && !sameVersion(kubelet, version) {
		if rebooted {
			what := fmt.Sprintf("its kubelet reports %s, not %s", kubelet, version)
			if says := labelerSays(node); says != "" {
				what += "; " + says
			}
			return fellBack(what)
		}
		return Outcome{Waiting: fmt.Sprintf("%s completed; waiting for node %s to come back from its reboot with %s (its kubelet reports %s)", ref, node.Name, version, kubelet)}
	}

	want, parsed := syntax.ParseKairosImage(image)
	reported, labelled := node.Labels[labelSoftwareVersion]
	if !parsed || !labelled {
		// The image's tag does not say its release, or no node labeler runs (an operator before
		// v0.1.3): the kubelet's version is all there is to check.
		return Outcome{Done: true}
	}
	if node.Annotations[annotationKairosVersion] == want.KairosVersion && reported == labelValue(want.SoftwareVersion()) && node.Labels[labelBootState] != bootStatePassive {
		return Outcome{Done: true}
	}
	if rebooted && settled && node.Labels[labelBootState] == bootStatePassive {
		return fellBack(labelerSays(node))
	}
	return Outcome{Waiting: fmt.Sprintf("%s completed; waiting for the Kairos operator's node labeler to report Kairos %s with %s on node %s (it reports %s with %s, boot state %s)",
		ref, want.KairosVersion, want.SoftwareVersion(), node.Name, node.Annotations[annotationKairosVersion], reported, node.Labels[labelBootState])}
}

// labelerSays is what the node labeler reports about a node, "" when it does not run there.
func labelerSays(node *corev1.Node) string {
	state, ok := node.Labels[labelBootState]
	if !ok {
		return ""
	}
	return fmt.Sprintf("the node labeler reports %s=%s, Kairos %s with %s", labelBootState, state, node.Annotations[annotationKairosVersion], node.Labels[labelSoftwareVersion])
}

// completedAt is when the operator last updated the node's status in the NodeOpUpgrade (its
// completion), or the NodeOpUpgrade's status; the zero time when it says neither.
func completedAt(nou *unstructured.Unstructured, nodeName string) time.Time {
	for _, path := range [][]string{{"status", "nodeStatuses", nodeName, "lastUpdated"}, {"status", "lastUpdated"}} {
		if s, _, _ := unstructured.NestedString(nou.Object, path...); s != "" {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return t
			}
		}
	}
	return time.Time{}
}
