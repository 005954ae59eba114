package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// ConditionObject is an object with v1beta2 conditions (Cluster, Machine, MachineDeployment,
// KairosConfig, KairosSimMachine, ...).
type ConditionObject interface {
	client.Object
	conditions.Getter
}

// CheckCondition reads obj and returns nil when its condition condType has the given status
// (and, when reason is not empty, the reason).
func CheckCondition(ctx context.Context, c client.Client, obj ConditionObject, condType string, status metav1.ConditionStatus, reason string) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	cond := conditions.Get(obj, condType)
	if cond == nil {
		return fmt.Errorf("%T %s has no %s condition", obj, obj.GetName(), condType)
	}
	if cond.Status != status || (reason != "" && cond.Reason != reason) {
		return fmt.Errorf("%T %s condition %s is %s/%s (%q), want %s/%s", obj, obj.GetName(), condType, cond.Status, cond.Reason, cond.Message, status, reason)
	}
	return nil
}

// WaitForCondition waits until obj's condition condType has the given status (and reason, when
// not empty); obj is left with its last observed state.
func WaitForCondition(t testing.TB, c client.Client, obj ConditionObject, condType string, status metav1.ConditionStatus, reason string, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, timeout, func() error {
		return CheckCondition(context.Background(), c, obj, condType, status, reason)
	})
}
