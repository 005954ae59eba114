package validation

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdDir is where make generate writes the bootstrap provider's CRDs. The test reads the files
// of the tree: it runs in the repository, not from a module cache.
const crdDir = "../../../bootstrap/config/crd/bases"

// celRule is one x-kubernetes-validations rule of a CRD, with the path the API server reports
// its error at (the rule's place in the schema joined with its fieldPath; [*] for list items).
type celRule struct {
	at, message, messageExpression string
}

// crdRules reads the v1beta2 schema of a CRD file and returns all its CEL rules.
func crdRules(t *testing.T, file string) []celRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var rules []celRule
	var walk func(path string, node map[string]any)
	walk = func(path string, node map[string]any) {
		list, _ := node["x-kubernetes-validations"].([]any)
		for _, r := range list {
			rule, _ := r.(map[string]any)
			fp, _ := rule["fieldPath"].(string)
			msg, _ := rule["message"].(string)
			expr, _ := rule["messageExpression"].(string)
			rules = append(rules, celRule{at: strings.TrimPrefix(path+fp, "."), message: msg, messageExpression: expr})
		}
		props, _ := node["properties"].(map[string]any)
		for name, p := range props {
			if child, ok := p.(map[string]any); ok {
				walk(path+"."+name, child)
			}
		}
		if items, ok := node["items"].(map[string]any); ok {
			walk(path+"[*]", items)
		}
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1beta2" {
			walk("", v.Schema.OpenAPIV3Schema)
		}
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no CEL rules in its v1beta2 schema", file)
	}
	return rules
}

// matches tells whether a rule says msg (for a fmt* format, whether its messageExpression is
// the format's text around an expression giving the distribution).
func (r celRule) matches(msg string) bool {
	before, after, isFormat := strings.Cut(msg, "%s")
	if !isFormat {
		return r.message == msg
	}
	re := regexp.MustCompile(`^'` + regexp.QuoteMeta(before) + `' \+ .+ \+ '` + regexp.QuoteMeta(after) + `'$`)
	return r.messageExpression != "" && re.MatchString(r.messageExpression)
}

// TestMessagesAreTheCRDs: the Go validation refuses what the CEL rules of the KairosConfig and
// KairosConfigTemplate CRDs refuse, in their words. The markers cannot name Go constants, so
// this test is what keeps the two wordings one: every message constant is the message of
// exactly one rule at its field in each CRD (so the template repeats no rule of its own, and
// loses none), and every rule of the CRDs is either one of them or listed with the Go code
// that checks it.
func TestMessagesAreTheCRDs(t *testing.T) {
	type want struct{ msg, at string }
	wants := []want{
		{msgPasswordTwice, "spec.userPassword"},
		{msgWorkerTokenTwice, "spec.workerToken"},
		{msgHostnameAndPrefix, "spec.hostnamePrefix"},
		{msgContentTwice, "spec.manifests[*].contentFrom"},
		{msgContentTwice, "spec.files[*].contentFrom"},
		{msgContentTwice, "spec.cloudConfigFragments[*].contentFrom"},
		{msgContentMissing, "spec.manifests[*].content"},
		{msgContentMissing, "spec.files[*].content"},
		{msgContentMissing, "spec.cloudConfigFragments[*].content"},
		{msgRebootAndPoweroff, "spec.install.poweroff"},
		{msgStaysInInstaller, "spec.install.reboot"},
		{msgSingleNodeWorker, "spec.singleNode"},
		{msgWorkerTokenOnControlPlane, "spec.workerToken"},
		{msgWorkerTokenOnControlPlane, "spec.workerTokenSecretRef"},
		{msgManifestsOnWorker, "spec.manifests"},
		{msgK0sConfigOnWorker, "spec.k0s.config"},
		{fmtK0sOptionsElsewhere, "spec.k0s"},
		{fmtK3sOptionsElsewhere, "spec.k3s"},
		// Checked by the renderer (common/render, vip.go), which admission reaches through the
		// dry render, in the same words.
		{"only control-plane nodes hold the virtual IP: remove it from worker configs", "spec.virtualIP"},
		{msgEtcdSnapshotsOnWorker, "spec.etcdSnapshots"},
		{msgCronFields, "spec.etcdSnapshots.schedule"},
		{msgEndpointScheme, "spec.etcdSnapshots.s3.endpoint"},
		{msgEndpointPath, "spec.etcdSnapshots.s3.endpoint"},
		{msgBucketName, "spec.etcdSnapshots.s3.bucket"},
		{msgPrefix, "spec.etcdSnapshots.s3.prefix"},
		{msgRegion, "spec.etcdSnapshots.s3.region"},
		{msgCABundlePEM, "spec.etcdSnapshots.s3.caBundle"},
	}

	for file, prefix := range map[string]string{
		"bootstrap.cluster.x-k8s.io_kairosconfigs.yaml":         "",
		"bootstrap.cluster.x-k8s.io_kairosconfigtemplates.yaml": "spec.template.",
	} {
		t.Run(file, func(t *testing.T) {
			rules := crdRules(t, file)
			used := make([]bool, len(rules))
			for _, w := range wants {
				at := prefix + w.at
				var found []int
				for i, r := range rules {
					if r.at == at && r.matches(w.msg) {
						found = append(found, i)
					}
				}
				if len(found) != 1 {
					t.Errorf("%d rules at %s say %q, want exactly 1", len(found), at, w.msg)
				}
				for _, i := range found {
					used[i] = true
				}
			}
			var unknown []string
			for i, r := range rules {
				if !used[i] {
					unknown = append(unknown, fmt.Sprintf("%s: %q%q", r.at, r.message, r.messageExpression))
				}
			}
			sort.Strings(unknown)
			for _, u := range unknown {
				t.Errorf("a CEL rule the Go validation does not check in the same words (add it, or list where it is checked): %s", u)
			}
		})
	}
}
