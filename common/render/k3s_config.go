package render

import (
	"go.yaml.in/yaml/v3"
)

// checkK3sUserConfig makes sure Config is a YAML map whose keys (k3s reads
// each as the flag of the same name) follow the flag rules of checkArgs.
func (n *Node) checkK3sUserConfig(p *problems) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(n.Config), &m); err != nil {
		p.add("Config", "not a YAML map of k3s options: %v", err)
		return
	}
	n.checkK3sConfigKeys(p, m)
}
