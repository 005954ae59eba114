package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/merge"
)

// BaseName names the generated document in merge errors.
const BaseName = "generated"

// Step names of the rendered document.
const (
	stepFiles     = "kairos-capi bootstrap files"
	stepUserFiles = "kairos-capi user files"
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
func Document(n Node, fragments ...merge.Fragment) ([]byte, error) {
	cfg, err := Render(n)
	if err != nil {
		return nil, err
	}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	if len(fragments) == 0 {
		return data, nil
	}
	return merge.Merge(data, BaseName, fragments...)
}

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

	// Every generated path is reserved: a user file must not replace one.
	for i, f := range n.Files {
		for _, g := range b.files {
			if g.Path == f.Path {
				return fmt.Errorf("invalid node: Files[%d].Path: %q is written by the renderer", i, f.Path)
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

	network := make([]cloudconfig.Step, 0, 2)
	if len(n.PreCommands) > 0 {
		network = append(network, cloudconfig.Step{
			Name:     stepPre,
			If:       notInstallerOrRecovery + " && [ ! -e " + PreCommandsMarker + " ]",
			Commands: []string{"/bin/sh " + PreCommandsScript + " && touch " + PreCommandsMarker},
		})
	}
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
	c.Stages = cloudconfig.Stages{cloudconfig.StageBoot: boot, cloudconfig.StageNetwork: network}
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
