package e2e

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxProblems bounds how many configs a verification names; the count says the rest.
const maxProblems = 10

// verifyData checks the outcome the contract asks for, straight from the API server: every
// config is ready, and each has exactly one data Secret it controls, the one its status names.
func verifyData(ctx context.Context, c client.Client, kind configKind, namespace string, want int) []string {
	configs := &unstructured.UnstructuredList{}
	configs.SetGroupVersionKind(schema.GroupVersionKind{Group: kind.Group, Version: kind.Version, Kind: kind.Kind + "List"})
	if err := c.List(ctx, configs, client.InNamespace(namespace)); err != nil {
		return []string{fmt.Sprintf("listing %ss: %v", kind.Kind, err)}
	}
	secrets := &corev1.SecretList{}
	if err := c.List(ctx, secrets, client.InNamespace(namespace)); err != nil {
		return []string{fmt.Sprintf("listing Secrets: %v", err)}
	}
	owned := map[types.UID][]string{}
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if ref := metav1.GetControllerOf(s); ref != nil && ref.Kind == kind.Kind {
			owned[ref.UID] = append(owned[ref.UID], s.Name)
		}
	}

	var problems []string
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	if len(configs.Items) != want {
		report("%d %ss exist, want %d", len(configs.Items), kind.Kind, want)
	}
	for i := range configs.Items {
		cfg := &configs.Items[i]
		name, _, _ := unstructured.NestedString(cfg.Object, "status", "dataSecretName")
		switch data := owned[cfg.GetUID()]; {
		case !isReady(cfg):
			report("%s %s is not ready", kind.Kind, cfg.GetName())
		case len(data) != 1:
			report("%s %s controls %d data Secrets %v, want exactly 1", kind.Kind, cfg.GetName(), len(data), data)
		case data[0] != name:
			report("%s %s names data Secret %q but controls %q", kind.Kind, cfg.GetName(), name, data[0])
		}
	}
	if bad > len(problems) {
		problems = append(problems, fmt.Sprintf("... %d problems in all", bad))
	}
	return problems
}
