package render

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/merge"
)

// checkK3sUserConfig makes sure Config is a YAML map that leaves the keys the
// renderer manages alone.
func checkK3sUserConfig(s string, role Role) error {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		return fmt.Errorf("not a YAML map: %w", err)
	}
	owned := []string{"server", "token", "token-file", "agent-token", "agent-token-file"}
	if role == RoleControlPlane {
		owned = append(owned, "cluster-init", "https-listen-port")
	}
	for _, k := range owned {
		if _, ok := m[k]; ok {
			return &merge.ConflictError{Key: k, First: merge.Source{Name: BaseName}, Second: merge.Source{Name: "Config"}}
		}
	}
	return nil
}
