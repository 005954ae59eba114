package render

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/merge"
)

// BaseName names the generated document in merge errors.
const BaseName = "generated"

// Step names of the rendered document.
const (
	stepFiles     = "kairos-capi bootstrap files"
	stepUserFiles = "kairos-capi user files"
	stepImage     = "kairos-capi kairos image"
	stepPre       = "kairos-capi pre-commands"
	stepBootstrap = "kairos-capi bootstrap sentinel"
)

// notInstallerOrRecovery is true on an installed system booted normally: the
// live installer (install.auto boots it first) and recovery must not run
// commands or start the cluster.
const notInstallerOrRecovery = "[ ! -e /run/cos/live_mode ] && [ ! -e /run/cos/recovery_mode ] && [ ! -e /run/cos/uki_install_mode ]"

// Document renders the node and merges user fragments into it: the exact
// bytes to store in the bootstrap data Secret. Fragments are merged as they
// are (not escaped), so template expressions in them are rendered on the node.
//
// Every fragment is first read as a node reads it (cloudconfig.CheckFragment)
// and checked against the rules for user content (keys that hand the node to
// another provisioner or that the renderer owns, users the document already
// defines); the merged document is then read as a whole
// (cloudconfig.CheckNode) and must fit in a Secret. Problems are
// *FieldErrors: "Fragments[i]" for a fragment, with the key path inside it.
func Document(n Node, fragments ...merge.Fragment) ([]byte, error) {
	cfg, err := Render(n)
	if err != nil {
		return nil, err
	}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	var p problems
	checkFragments(&p, &n, fragments)
	if err := p.err(); err != nil {
		return nil, err
	}
	if len(fragments) > 0 {
		if data, err = merge.Merge(data, BaseName, fragments...); err != nil {
			return nil, fragmentError(err, fragments)
		}
		// The parts were checked one by one; this is the safety net for what
		// only their combination breaks. The generated document alone is
		// known to load (every golden is loaded by yip and validated by
		// kairos-sdk in the test module), and reading it costs about 40 times
		// what rendering does.
		for _, pr := range cloudconfig.CheckNode(data) {
			p.addAt("Document", pr.Path, "%s", pr.Message)
		}
	}
	if len(data) > MaxDocumentSize {
		field, size := largestPart(&n, fragments)
		p.add(field, "the bootstrap data would be %s but a Secret holds at most 1 MiB, and this is its largest part (%s): deliver large content another way (an image, a URL the node downloads)",
			mib(len(data)), mib(size))
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return data, nil
}

// forbiddenFragmentKeys are top-level Kairos keys a fragment may not set.
var forbiddenFragmentKeys = map[string]string{
	"p2p":        "p2p negotiates node roles itself, which conflicts with Cluster API owning them",
	"kubevip":    "Kairos' kubevip block would announce the control-plane endpoint outside Cluster API: set spec.virtualIP instead",
	"cluster":    "the cluster key hands roles and tokens to another mechanism",
	"k0s":        "the k0s block is generated: use the k0s options (args, env, config)",
	"k0s-worker": "the k0s-worker block is generated: use the k0s options (args, env)",
	"k3s":        "the k3s block is generated: use the k3s options (args, env, config)",
	"k3s-agent":  "the k3s-agent block is generated: use the k3s options (args, env, config)",
}

func checkFragments(p *problems, n *Node, fragments []merge.Fragment) {
	// Users the generated document defines; fragments may add others.
	owner := map[string]string{}
	for _, u := range n.Users {
		owner[u.Name] = BaseName + " document"
	}
	for i, f := range fragments {
		field := fmt.Sprintf("Fragments[%d]", i)
		problems := cloudconfig.CheckFragment(f.Content)
		for _, pr := range problems {
			p.addAt(field, pr.Path, "%s", pr.Message)
		}
		if len(problems) > 0 {
			continue
		}
		var top map[string]any
		if err := yaml.Unmarshal(f.Content, &top); err == nil {
			for _, k := range sortedKeys(top) {
				if why, ok := forbiddenFragmentKeys[k]; ok {
					p.addAt(field, k, "may not be set by a fragment: %s", why)
				}
			}
			if _, ok := top["install"]; ok && n.Install == nil {
				p.addAt(field, "install", "set install in the spec (it reboots into the installed system by default) and keep only extra installer options in the fragment: an install without reboot leaves the machine in the live installer")
			}
		}
		for _, u := range cloudconfig.Users(f.Content) {
			if prev, ok := owner[u.Name]; ok {
				p.addAt(field, u.Path, "user %q is already defined by the %s: yip keeps one definition per user, so this one would silently replace it (add a user of another name)", u.Name, prev)
				continue
			}
			owner[u.Name] = fmt.Sprintf("fragment %q", f.Name)
		}
	}
}

// fragmentError names the fragment a merge error comes from.
func fragmentError(err error, fragments []merge.Fragment) error {
	var ce *merge.ConflictError
	if errors.As(err, &ce) && ce.Second.Fragment {
		for i, f := range fragments {
			if f.Name == ce.Second.Name {
				return &FieldError{Field: fmt.Sprintf("Fragments[%d]", i), Err: err}
			}
		}
	}
	return err
}

// largestPart returns the field holding the most bytes of user content.
func largestPart(n *Node, fragments []merge.Fragment) (string, int) {
	field, size := "Document", 0
	consider := func(f string, s int) {
		if s > size {
			field, size = f, s
		}
	}
	for i, f := range n.Files {
		consider(fmt.Sprintf("Files[%d].Content", i), len(f.Content))
	}
	for i, m := range n.Manifests {
		consider(fmt.Sprintf("Manifests[%d].Content", i), len(m.Content))
	}
	for i, f := range fragments {
		consider(fmt.Sprintf("Fragments[%d]", i), len(f.Content))
	}
	consider("Config", len(n.Config))
	return field, size
}

func mib(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Render validates n and returns the typed document.
func Render(n Node) (*cloudconfig.Config, error) {
	v, err := n.validate()
	if err != nil {
		return nil, fmt.Errorf("invalid node: %w", err)
	}
	b := &builder{
		n:         &n,
		version:   v.version,
		k0sConfig: v.k0sConfig,
		kubeVIP:   v.kubeVIPManifest,
		service:   ServiceName(n.Distribution, n.Role),
		cfg:       &cloudconfig.Config{},
		files:     make([]cloudconfig.File, 0, 24),
	}
	if err := b.build(); err != nil {
		return nil, err
	}
	return b.cfg, nil
}

type builder struct {
	n         *Node
	version   string
	k0sConfig string
	kubeVIP   string
	service   string
	cfg       *cloudconfig.Config
	files     []cloudconfig.File
	dirs      []cloudconfig.Directory
}

// file adds a generated root-owned file. Content is escaped: yip renders
// templates in file contents, and the node must write exactly these bytes.
func (b *builder) file(path string, mode cloudconfig.Mode, content string) {
	b.files = append(b.files, cloudconfig.File{Path: path, Permissions: mode, Content: EscapeTemplates(content)})
}

func (b *builder) dir(path string, mode cloudconfig.Mode) {
	b.dirs = append(b.dirs, cloudconfig.Directory{Path: path, Permissions: mode})
}

func (b *builder) build() error {
	n := b.n
	c := b.cfg
	switch {
	case n.Hostname != "":
		c.Hostname = n.Hostname
	case n.HostnamePrefix != "":
		c.Hostname = n.HostnamePrefix + HostnameSuffixTemplate
	}
	c.Users = make([]cloudconfig.User, len(n.Users))
	for i, u := range n.Users {
		c.Users[i] = cloudconfig.User{
			Name:              u.Name,
			Passwd:            u.Password,
			LockPasswd:        u.Password == "",
			Groups:            slices.Clone(u.Groups),
			SSHAuthorizedKeys: slices.Clone(u.SSHAuthorizedKeys),
		}
	}
	if in := n.Install; in != nil {
		c.Install = &cloudconfig.Install{Auto: in.Auto, Device: in.Device, Reboot: in.Reboot, Poweroff: in.Poweroff}
	}

	switch {
	case n.Distribution == K0s && n.Role == RoleControlPlane:
		b.k0sController()
	case n.Distribution == K0s:
		b.k0sWorker()
	case n.Role == RoleControlPlane:
		b.k3sServer()
	default:
		b.k3sAgent()
	}
	b.bootstrapFiles()
	b.etcdSnapshots()

	arm := b.bootAssessmentArmStep()

	// Every generated path is reserved: a user file must not replace one.
	for i, f := range n.Files {
		for _, g := range append(b.files, arm.Files...) {
			if g.Path == f.Path {
				return fmt.Errorf("invalid node: %w", &FieldError{Field: fmt.Sprintf("Files[%d].Path", i), Err: fmt.Errorf("%q is written by the renderer", f.Path)})
			}
		}
	}

	boot := []cloudconfig.Step{{Name: stepFiles, Directories: b.dirs, Files: b.files}}
	if len(n.Files) > 0 {
		// A step of its own, after the cloud-init step of this document has
		// created the users, so that "user:group" owners resolve.
		uf := make([]cloudconfig.File, len(n.Files))
		for i, f := range n.Files {
			mode := f.Permissions
			if mode == 0 {
				mode = 0o600
			}
			uid, gid, owner := parseOwner(f.Owner)
			uf[i] = cloudconfig.File{
				Path:        f.Path,
				Permissions: cloudconfig.Mode(mode),
				Owner:       uid,
				Group:       gid,
				OwnerString: owner,
				Content:     EscapeTemplates(f.Content),
			}
		}
		boot = append(boot, cloudconfig.Step{Name: stepUserFiles, Files: uf})
	}

	network := make([]cloudconfig.Step, 0, 4)
	if n.Image != "" {
		// First in the network stage: the upgrade pulls the image, and the distribution, which
		// the Kairos agent starts after this stage, must not start on the wrong image (the
		// preflight checks it again, imageScript).
		network = append(network, cloudconfig.Step{
			Name:     stepImage,
			If:       notInstallerOrRecovery + " && [ ! -e " + BootstrapDoneMarker + " ]",
			Commands: []string{"/bin/sh " + ImageScript + " upgrade"},
		})
	}
	if len(n.PreCommands) > 0 {
		network = append(network, cloudconfig.Step{
			Name:     stepPre,
			If:       notInstallerOrRecovery + " && [ ! -e " + PreCommandsMarker + " ]",
			Commands: []string{"/bin/sh " + PreCommandsScript + " && touch " + PreCommandsMarker},
		})
	}
	snapshotTimer, beforeUpgrade := b.etcdSnapshotSteps()
	network = append(network, snapshotTimer...)
	network = append(network, cloudconfig.Step{
		Name: stepBootstrap,
		If:   notInstallerOrRecovery,
		Commands: []string{
			"systemctl daemon-reload",
			// --no-block: the unit waits for the distribution, which the
			// Kairos agent starts only after this stage has finished.
			"systemctl start --no-block " + BootstrapUnit,
		},
	})
	network = append(network, bootAssessmentVerifyStep())
	c.Stages = cloudconfig.Stages{
		// After Kairos' own boot.before step (08_grub.yaml) has cleared GRUB's boot assessment
		// variables: bootassessment.go.
		cloudconfig.StageBoot + ".before": {arm},
		cloudconfig.StageBoot:             boot,
		cloudconfig.StageNetwork:          network,
		cloudconfig.StageAfterUpgrade:     {bootAssessmentUpgradeStep()},
	}
	if len(beforeUpgrade) > 0 {
		c.Stages[cloudconfig.StageBeforeUpgrade] = beforeUpgrade
	}
	return nil
}

// distribution returns the k0s/k3s block with our args, then the user's.
func (b *builder) distribution(args []string) *cloudconfig.Distribution {
	d := &cloudconfig.Distribution{Enabled: true, Args: append(args, b.n.Args...)}
	if len(b.n.Env) > 0 {
		d.Env = maps.Clone(b.n.Env)
	}
	return d
}

// EscapeTemplates protects text from yip's template rendering: every "{{"
// becomes {{"{{"}}, which renders back to "{{". yip renders file contents,
// stage commands, conditions and hostnames, even when they are base64
// encoded.
func EscapeTemplates(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return strings.ReplaceAll(s, "{{", `{{"{{"}}`)
}
