// Package cloudconfig checks rendered Kairos documents with the parsers a
// Kairos node runs: yip (which loads the document and executes its stages)
// and the kairos-sdk schema (which validates it). It also decodes the
// k0s/k3s blocks that provider-kairos reads, strictly, because neither of the
// former looks at them.
//
// Besides Check, the package tells what a node would make of a document:
// Stages returns the stages yip loads, RenderedFiles and RenderedCommands the
// file contents and commands after yip's templating. A simulated node can use
// them to write exactly what a real one writes.
package cloudconfig

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	sdkschema "github.com/kairos-io/kairos-sdk/schema"
	yipschema "github.com/mudler/yip/pkg/schema"
	yipcloudinit "github.com/mudler/yip/pkg/schema/cloudinit"
	"github.com/santhosh-tekuri/jsonschema/v5"
	"gopkg.in/yaml.v3"
)

// Header is the line every document must start with.
const Header = "#cloud-config"

// Distribution blocks read by provider-kairos. A node runs at most one of them.
var distributionKeys = []string{"k0s", "k0s-worker", "k3s", "k3s-agent"}

// Error lists every problem Check found in a document.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kairos document has %d problem(s):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(strings.ReplaceAll(p, "\n", "\n    "))
	}
	return b.String()
}

type problems []string

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

// Check loads a rendered Kairos document exactly as a node would and returns
// every problem found, as an *Error, or nil.
//
// It requires the "#cloud-config" header on the first line, loads the
// document with yip and verifies that no stage was lost on the way, decodes
// the stages and the cloud-init keys strictly (a key yip does not know is
// ignored on the node, so it is reported), validates the document against the
// kairos-sdk schema, decodes the k0s, k0s-worker, k3s and k3s-agent blocks
// strictly, and renders every file content, stage command and "if" condition
// with yip's templating to report those the node would alter.
func Check(doc []byte) error {
	var p problems

	checkHeader(doc, &p)

	var top map[string]yaml.Node
	if err := yaml.Unmarshal(doc, &top); err != nil {
		p.add("the document is not a YAML mapping: %v", err)
		return p.err()
	}
	if len(top) == 0 {
		p.add("the document is empty")
		return p.err()
	}

	loaded := checkYip(doc, &p)
	checkKairosSchema(doc, &p)
	checkDistributions(doc, top, &p)
	if loaded != nil {
		checkTemplating(loaded, yipcloudinit.IsCloudConfig(string(doc)), &p)
	}
	return p.err()
}

func checkHeader(doc []byte, p *problems) {
	first, _, _ := bytes.Cut(doc, []byte("\n"))
	if line := strings.TrimRight(string(first), " \t\r"); line != Header {
		p.add("the first line must be %q, got %q", Header, line)
	}
	if !yipcloudinit.IsCloudConfig(string(doc)) {
		p.add("yip does not recognise the document as a cloud-config: users, write_files, runcmd and hostname would be ignored")
	}
}

// load runs yip's loader on the document, as the executor does for a config
// source.
func load(doc []byte) (*yipschema.YipConfig, error) {
	return yipschema.Load(string(doc), nil, nil, nil)
}

// Stages returns the stages yip loads from the document, including the
// steps it generates from the cloud-init keys (users, write_files and runcmd
// in boot, hostname in initramfs, github/gitlab keys in network).
func Stages(doc []byte) (map[string][]yipschema.Stage, error) {
	cfg, err := load(doc)
	if err != nil {
		return nil, err
	}
	return cfg.Stages, nil
}

// stagesDoc is the document seen by yip's stage decoder, with every other
// top-level key set aside.
type stagesDoc struct {
	Name   string                       `yaml:"name,omitempty"`
	Stages map[string][]yipschema.Stage `yaml:"stages,omitempty"`
	Rest   map[string]any               `yaml:",inline"`
}

// cloudInitDoc is the document seen by yip's cloud-init decoder, with every
// other top-level key set aside.
type cloudInitDoc struct {
	yipcloudinit.CloudConfig `yaml:",inline"`
	Rest                     map[string]any `yaml:",inline"`
}

func strictDecode(doc []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	return dec.Decode(out)
}

func checkYip(doc []byte, p *problems) *yipschema.YipConfig {
	cfg, err := load(doc)
	if err != nil {
		p.add("yip cannot load the document, the node would apply nothing of it: %v", err)
		return nil
	}
	isCloudConfig := yipcloudinit.IsCloudConfig(string(doc))

	// The cloud-init loader decodes the stages on the side and drops all of
	// them, silently, when that fails.
	var lax yipschema.YipConfig
	if err := yaml.Unmarshal(doc, &lax); err != nil {
		p.add("yip cannot decode the stages, so the node would silently drop every stage of the document: %v", err)
	} else if err := strictDecode(doc, &stagesDoc{}); err != nil {
		p.add("stages hold keys that yip ignores: %v", err)
	}
	if isCloudConfig {
		if err := strictDecode(doc, &cloudInitDoc{}); err != nil {
			p.add("users/write_files/growpart hold keys that yip ignores: %v", err)
		}
	}

	// Every step of the document must survive loading: compare with what
	// yip loads from the same document without its stages.
	var counted struct {
		Stages map[string][]yaml.Node `yaml:"stages"`
	}
	if err := yaml.Unmarshal(doc, &counted); err != nil {
		p.add("stages must map stage names to lists of steps, otherwise yip drops them: %v", err)
		return cfg
	}
	base, err := withoutStages(doc)
	if err != nil {
		p.add("cannot remove the stages to count them: %v", err)
		return cfg
	}
	baseCfg, err := load(base)
	if err != nil {
		p.add("yip cannot load the document without its stages: %v", err)
		return cfg
	}
	names := map[string]bool{}
	for n := range counted.Stages {
		names[n] = true
	}
	for n := range cfg.Stages {
		names[n] = true
	}
	for _, n := range sortedStageNames(names) {
		want := len(baseCfg.Stages[n]) + len(counted.Stages[n])
		if got := len(cfg.Stages[n]); got != want {
			p.add("stage %q: the document has %d step(s) but yip loaded %d: the stages would be dropped on the node",
				n, len(counted.Stages[n]), got-len(baseCfg.Stages[n]))
		}
	}
	return cfg
}

// withoutStages returns the document with its top-level stages key removed,
// keeping the comment lines it starts with (the header).
func withoutStages(doc []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the document is not a mapping")
	}
	m := root.Content[0]
	var kept []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == "stages" {
			continue
		}
		kept = append(kept, m.Content[i], m.Content[i+1])
	}
	m.Content = kept
	body, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(doc), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			break
		}
		out.WriteString(line)
	}
	out.WriteString("\n")
	out.Write(body)
	return out.Bytes(), nil
}

func checkKairosSchema(doc []byte, p *problems) {
	kc, err := sdkschema.NewConfigFromYAML(string(doc), sdkschema.RootSchema{})
	if err != nil {
		p.add("kairos-sdk cannot parse the document: %v", err)
		return
	}
	if !kc.HasHeader() {
		p.add("kairos-sdk finds no cloud-config header")
	}
	if !kc.IsValid() {
		var ve *jsonschema.ValidationError
		if errors.As(kc.ValidationError, &ve) {
			for _, leaf := range validationLeaves(ve) {
				p.add("kairos schema: %s: %s", instance(leaf.InstanceLocation), leaf.Message)
			}
		} else {
			p.add("kairos schema: %v", kc.ValidationError)
		}
	}
	warnings, err := kc.ValidateSemantics()
	for _, w := range warnings {
		p.add("kairos semantics: %s", w)
	}
	if err != nil {
		p.add("kairos semantics: %v", err)
	}
}

func validationLeaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, validationLeaves(c)...)
	}
	return out
}

func instance(loc string) string {
	if loc == "" {
		return "(document)"
	}
	return loc
}

// k0sBlock is what provider-kairos reads from k0s: and k0s-worker:.
type k0sBlock struct {
	Enabled     *bool             `yaml:"enabled"`
	Args        []string          `yaml:"args"`
	Env         map[string]string `yaml:"env"`
	ReplaceArgs bool              `yaml:"replace_args"`
	ReplaceEnv  bool              `yaml:"replace_env"`
}

// k3sBlock is what provider-kairos reads from k3s: and k3s-agent:.
type k3sBlock struct {
	Enabled          *bool             `yaml:"enabled"`
	Args             []string          `yaml:"args"`
	Env              map[string]string `yaml:"env"`
	ReplaceArgs      bool              `yaml:"replace_args"`
	ReplaceEnv       bool              `yaml:"replace_env"`
	EmbeddedRegistry bool              `yaml:"embedded_registry"`
}

type distributionsDoc struct {
	K0s       *k0sBlock      `yaml:"k0s"`
	K0sWorker *k0sBlock      `yaml:"k0s-worker"`
	K3s       *k3sBlock      `yaml:"k3s"`
	K3sAgent  *k3sBlock      `yaml:"k3s-agent"`
	Rest      map[string]any `yaml:",inline"`
}

func checkDistributions(doc []byte, top map[string]yaml.Node, p *problems) {
	var present []string
	for _, k := range distributionKeys {
		if _, ok := top[k]; ok {
			present = append(present, k)
		}
	}
	if len(present) > 1 {
		p.add("a node runs one distribution role, but the document has %s", strings.Join(present, ", "))
	}
	if len(present) == 0 {
		return
	}
	var d distributionsDoc
	if err := strictDecode(doc, &d); err != nil {
		p.add("k0s/k3s blocks: %v", err)
		return
	}
	enabled := map[string]*bool{}
	if d.K0s != nil {
		enabled["k0s"] = d.K0s.Enabled
	}
	if d.K0sWorker != nil {
		enabled["k0s-worker"] = d.K0sWorker.Enabled
	}
	if d.K3s != nil {
		enabled["k3s"] = d.K3s.Enabled
	}
	if d.K3sAgent != nil {
		enabled["k3s-agent"] = d.K3sAgent.Enabled
	}
	for _, k := range present {
		if e := enabled[k]; e == nil || !*e {
			p.add("%s: enabled must be true, otherwise provider-kairos ignores the block", k)
		}
	}
}

// stageRank orders stage names the way a node runs them; other stages
// (install, upgrade, ...) sort after, by name.
func stageRank(name string) int {
	base, suffix, _ := strings.Cut(name, ".")
	ranks := map[string]int{"rootfs": 0, "initramfs": 10, "fs": 20, "boot": 30, "network": 40, "reconcile": 50}
	r, ok := ranks[base]
	if !ok {
		return 1000
	}
	switch suffix {
	case "before":
		r--
	case "after":
		r++
	case "":
	default:
		return 1000
	}
	return r
}

func sortedStageNames(set map[string]bool) []string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := stageRank(names[i]), stageRank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names
}
