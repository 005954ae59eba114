package cloudconfig

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/internal/yamlenc"
)

// Header must be the first line of every Kairos cloud-config document.
const Header = "#cloud-config"

// Well-known stage names, in the order a Kairos node runs them.
const (
	StageRootfs    = "rootfs"
	StageInitramfs = "initramfs"
	StageFs        = "fs"
	StageBoot      = "boot"
	StageNetwork   = "network"
	StageReconcile = "reconcile"
	// StageAfterUpgrade is an action stage: kairos-agent runs it after writing a new image, before
	// the reboot into it.
	StageAfterUpgrade = "after-upgrade"
	// StageBeforeUpgrade is an action stage: kairos-agent runs it before it writes a new image.
	StageBeforeUpgrade = "before-upgrade"
)

// Config is a Kairos cloud-config document.
type Config struct {
	// Hostname may contain yip template expressions ({{ .MachineID }} ...).
	Hostname   string      `yaml:"hostname,omitempty"`
	Users      []User      `yaml:"users,omitempty"`
	Install    *Install    `yaml:"install,omitempty"`
	WriteFiles []WriteFile `yaml:"write_files,omitempty"`
	Stages     Stages      `yaml:"stages,omitempty"`

	K0s       *Distribution `yaml:"k0s,omitempty"`
	K0sWorker *Distribution `yaml:"k0s-worker,omitempty"`
	K3s       *Distribution `yaml:"k3s,omitempty"`
	K3sAgent  *Distribution `yaml:"k3s-agent,omitempty"`
}

// User is an entry of the top-level users list.
type User struct {
	Name string `yaml:"name"`
	// Passwd is a plain or crypt(3)-hashed password.
	Passwd     string   `yaml:"passwd,omitempty"`
	LockPasswd bool     `yaml:"lock_passwd,omitempty"`
	Groups     []string `yaml:"groups,omitempty"`
	// SSHAuthorizedKeys holds raw keys or "github:<user>" / "gitlab:<user>".
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys,omitempty"`
}

// Install drives an unattended installation to disk.
type Install struct {
	Auto bool `yaml:"auto"`
	// Device is "auto", a /dev/... path or script://<command>.
	Device string `yaml:"device,omitempty"`
	// Reboot and Poweroff are exclusive.
	Reboot   bool `yaml:"reboot,omitempty"`
	Poweroff bool `yaml:"poweroff,omitempty"`
}

// WriteFile is a cloud-init style write_files entry (applied in the boot
// stage, before the users of the same document exist).
type WriteFile struct {
	Path     string `yaml:"path"`
	Content  string `yaml:"content,omitempty"`
	Encoding string `yaml:"encoding,omitempty"`
	// Owner is "user:group".
	Owner string `yaml:"owner,omitempty"`
	// Permissions is an octal string such as "0644".
	Permissions string `yaml:"permissions,omitempty"`
}

// Stages maps a stage name (boot, network, ...) to its steps.
type Stages map[string][]Step

// Step is one yip step of a stage. Within a step yip applies directories,
// then files, then commands, then systemctl, then environment.
type Step struct {
	Name string `yaml:"name,omitempty"`
	// If is a shell condition; the step is skipped when it fails.
	If                 string            `yaml:"if,omitempty"`
	OnlyServiceManager string            `yaml:"only_service_manager,omitempty"`
	Directories        []Directory       `yaml:"directories,omitempty"`
	Files              []File            `yaml:"files,omitempty"`
	Commands           []string          `yaml:"commands,omitempty"`
	Systemctl          *Systemctl        `yaml:"systemctl,omitempty"`
	Environment        map[string]string `yaml:"environment,omitempty"`
	EnvironmentFile    string            `yaml:"environment_file,omitempty"`
}

// File is a file written by a stage step.
type File struct {
	Path        string `yaml:"path"`
	Permissions Mode   `yaml:"permissions"`
	Owner       int    `yaml:"owner"`
	Group       int    `yaml:"group"`
	// OwnerString is "user:group", resolved on the node; it wins over
	// Owner/Group. (yip's key is "ownerstring"; "owner_string" is ignored.)
	OwnerString string `yaml:"ownerstring,omitempty"`
	Encoding    string `yaml:"encoding,omitempty"`
	Content     string `yaml:"content"`
}

// Directory is a directory ensured by a stage step.
type Directory struct {
	Path        string `yaml:"path"`
	Permissions Mode   `yaml:"permissions"`
	Owner       int    `yaml:"owner"`
	Group       int    `yaml:"group"`
}

// Systemctl manages units in a stage step. yip runs "systemctl start" in the
// foreground, so Start must only name units that finish starting quickly.
type Systemctl struct {
	Enable    []string            `yaml:"enable,omitempty"`
	Disable   []string            `yaml:"disable,omitempty"`
	Start     []string            `yaml:"start,omitempty"`
	Mask      []string            `yaml:"mask,omitempty"`
	Overrides []SystemctlOverride `yaml:"overrides,omitempty"`
}

// SystemctlOverride writes a drop-in for a unit.
type SystemctlOverride struct {
	Service string `yaml:"service,omitempty"`
	Name    string `yaml:"name,omitempty"`
	Content string `yaml:"content,omitempty"`
}

// Distribution is the k0s, k0s-worker, k3s or k3s-agent block read by
// provider-kairos. Only enabled: true activates it. The node starts the
// service once with "<binary> <role> <args joined by spaces>".
type Distribution struct {
	Enabled          bool              `yaml:"enabled"`
	Args             []string          `yaml:"args,omitempty"`
	Env              map[string]string `yaml:"env,omitempty"`
	ReplaceArgs      bool              `yaml:"replace_args,omitempty"`
	ReplaceEnv       bool              `yaml:"replace_env,omitempty"`
	EmbeddedRegistry bool              `yaml:"embedded_registry,omitempty"`
}

// Mode is a numeric file mode as yip expects it in stage files and
// directories.
type Mode uint32

// String returns the octal spelling, e.g. "0644".
func (m Mode) String() string {
	if m <= 0o777 {
		// The common case, without fmt: "0" and three octal digits.
		return string([]byte{'0', byte('0' + m>>6&7), byte('0' + m>>3&7), byte('0' + m&7)})
	}
	return "0" + strconv.FormatUint(uint64(m), 8)
}

// MarshalYAML encodes the mode as a decimal YAML integer with the octal
// spelling as a line comment.
func (m Mode) MarshalYAML() (any, error) {
	return &yaml.Node{
		Kind:        yaml.ScalarNode,
		Tag:         "!!int",
		Value:       strconv.FormatUint(uint64(m), 10),
		LineComment: "# " + m.String(),
	}, nil
}

// UnmarshalYAML accepts YAML integers only, like yip: a quoted mode is an
// error.
func (m *Mode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return fmt.Errorf("line %d: file permissions must be a YAML integer, got %q", n.Line, n.Value)
	}
	var v uint32
	if err := n.Decode(&v); err != nil {
		return err
	}
	*m = Mode(v)
	return nil
}

// stageRank orders stages by when a node runs them; unknown stages follow,
// alphabetically.
func stageRank(name string) int {
	base, suffix, _ := strings.Cut(name, ".")
	r := 100
	switch base {
	case StageRootfs:
		r = 0
	case StageInitramfs:
		r = 10
	case StageFs:
		r = 20
	case StageBoot:
		r = 30
	case StageNetwork:
		r = 40
	case StageReconcile:
		r = 50
	}
	if r < 100 {
		switch suffix {
		case "before":
			r--
		case "after":
			r++
		case "":
		default:
			r = 100
		}
	}
	return r
}

func (s Stages) hasSteps() bool {
	for _, steps := range s {
		if len(steps) > 0 {
			return true
		}
	}
	return false
}

// StageNames returns the stage names in the order Marshal writes them.
func (s Stages) StageNames() []string {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := stageRank(a), stageRank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return names
}

// Marshal encodes the document, "#cloud-config" first.
func (c *Config) Marshal() ([]byte, error) {
	e := yamlenc.New(c.sizeHint())
	e.Comment(Header)
	if c.Hostname != "" {
		e.String(0, "hostname", c.Hostname)
	}
	if len(c.Users) > 0 {
		e.Key(0, "users")
		e.Newline()
		for i := range c.Users {
			e.Item(2)
			c.Users[i].encode(e, 4)
			e.EndItem()
		}
	}
	if c.Install != nil {
		e.Key(0, "install")
		e.Newline()
		c.Install.encode(e, 2)
	}
	if len(c.WriteFiles) > 0 {
		e.Key(0, "write_files")
		e.Newline()
		for i := range c.WriteFiles {
			e.Item(2)
			c.WriteFiles[i].encode(e, 4)
			e.EndItem()
		}
	}
	if c.Stages.hasSteps() {
		e.Key(0, "stages")
		e.Newline()
		for _, name := range c.Stages.StageNames() {
			steps := c.Stages[name]
			if len(steps) == 0 {
				continue // an empty stage means nothing to yip
			}
			e.Key(2, name)
			e.Newline()
			for i := range steps {
				e.Item(4)
				steps[i].encode(e, 6)
				e.EndItem()
			}
		}
	}
	c.K0s.encode(e, "k0s")
	c.K0sWorker.encode(e, "k0s-worker")
	c.K3s.encode(e, "k3s")
	c.K3sAgent.encode(e, "k3s-agent")
	if err := e.Err(); err != nil {
		return nil, fmt.Errorf("encoding cloud-config: %w", err)
	}
	return e.Bytes(), nil
}

// sizeHint estimates the encoded size so the buffer rarely grows.
func (c *Config) sizeHint() int {
	n := 1024 + len(c.Users)*256
	for _, f := range c.WriteFiles {
		n += 128 + blockSize(f.Content, 6)
	}
	for _, steps := range c.Stages {
		for _, st := range steps {
			n += 128 + len(st.If) + len(st.Directories)*96
			for _, f := range st.Files {
				n += 128 + len(f.Path) + blockSize(f.Content, 12)
			}
			for _, cmd := range st.Commands {
				n += 16 + len(cmd)
			}
		}
	}
	return n
}

// blockSize is the size of s as a block scalar indented by indent.
func blockSize(s string, indent int) int {
	return len(s) + (strings.Count(s, "\n")+1)*indent
}

func (u *User) encode(e *yamlenc.Encoder, ind int) {
	e.String(ind, "name", u.Name)
	if u.Passwd != "" {
		e.String(ind, "passwd", u.Passwd)
	}
	if u.LockPasswd {
		e.Bool(ind, "lock_passwd", true)
	}
	if len(u.Groups) > 0 {
		e.StringList(ind, "groups", u.Groups)
	}
	if len(u.SSHAuthorizedKeys) > 0 {
		e.StringList(ind, "ssh_authorized_keys", u.SSHAuthorizedKeys)
	}
}

func (in *Install) encode(e *yamlenc.Encoder, ind int) {
	e.Bool(ind, "auto", in.Auto)
	if in.Device != "" {
		e.String(ind, "device", in.Device)
	}
	if in.Reboot {
		e.Bool(ind, "reboot", true)
	}
	if in.Poweroff {
		e.Bool(ind, "poweroff", true)
	}
}

func (f *WriteFile) encode(e *yamlenc.Encoder, ind int) {
	e.String(ind, "path", f.Path)
	if f.Encoding != "" {
		e.String(ind, "encoding", f.Encoding)
	}
	if f.Owner != "" {
		e.String(ind, "owner", f.Owner)
	}
	if f.Permissions != "" {
		// Always a string: cloud-init parses it as octal text.
		e.Key(ind, "permissions")
		e.StringValue(ind+2, f.Permissions)
	}
	if f.Content != "" {
		e.String(ind, "content", f.Content)
	}
}

func (s *Step) encode(e *yamlenc.Encoder, ind int) {
	if s.Name != "" {
		e.String(ind, "name", s.Name)
	}
	if s.If != "" {
		e.String(ind, "if", s.If)
	}
	if s.OnlyServiceManager != "" {
		e.String(ind, "only_service_manager", s.OnlyServiceManager)
	}
	if len(s.Directories) > 0 {
		e.Key(ind, "directories")
		e.Newline()
		for i := range s.Directories {
			d := &s.Directories[i]
			e.Item(ind + 2)
			e.String(ind+4, "path", d.Path)
			e.Int(ind+4, "permissions", int64(d.Permissions), d.Permissions.String())
			e.Int(ind+4, "owner", int64(d.Owner), "")
			e.Int(ind+4, "group", int64(d.Group), "")
			e.EndItem()
		}
	}
	if len(s.Files) > 0 {
		e.Key(ind, "files")
		e.Newline()
		for i := range s.Files {
			f := &s.Files[i]
			e.Item(ind + 2)
			e.String(ind+4, "path", f.Path)
			e.Int(ind+4, "permissions", int64(f.Permissions), f.Permissions.String())
			e.Int(ind+4, "owner", int64(f.Owner), "")
			e.Int(ind+4, "group", int64(f.Group), "")
			if f.OwnerString != "" {
				e.String(ind+4, "ownerstring", f.OwnerString)
			}
			if f.Encoding != "" {
				e.String(ind+4, "encoding", f.Encoding)
			}
			e.String(ind+4, "content", f.Content)
			e.EndItem()
		}
	}
	if len(s.Commands) > 0 {
		e.StringList(ind, "commands", s.Commands)
	}
	if sc := s.Systemctl; sc != nil {
		e.Key(ind, "systemctl")
		e.Newline()
		if len(sc.Enable) > 0 {
			e.StringList(ind+2, "enable", sc.Enable)
		}
		if len(sc.Disable) > 0 {
			e.StringList(ind+2, "disable", sc.Disable)
		}
		if len(sc.Start) > 0 {
			e.StringList(ind+2, "start", sc.Start)
		}
		if len(sc.Mask) > 0 {
			e.StringList(ind+2, "mask", sc.Mask)
		}
		if len(sc.Overrides) > 0 {
			e.Key(ind+2, "overrides")
			e.Newline()
			for i := range sc.Overrides {
				o := &sc.Overrides[i]
				e.Item(ind + 4)
				if o.Service != "" {
					e.String(ind+6, "service", o.Service)
				}
				if o.Name != "" {
					e.String(ind+6, "name", o.Name)
				}
				if o.Content != "" {
					e.String(ind+6, "content", o.Content)
				}
				e.EndItem()
			}
		}
	}
	if len(s.Environment) > 0 {
		e.StringMap(ind, "environment", s.Environment)
	}
	if s.EnvironmentFile != "" {
		e.String(ind, "environment_file", s.EnvironmentFile)
	}
}

func (d *Distribution) encode(e *yamlenc.Encoder, key string) {
	if d == nil {
		return
	}
	e.Key(0, key)
	e.Newline()
	e.Bool(2, "enabled", d.Enabled)
	if len(d.Args) > 0 {
		e.StringList(2, "args", d.Args)
	}
	if len(d.Env) > 0 {
		e.StringMap(2, "env", d.Env)
	}
	if d.ReplaceArgs {
		e.Bool(2, "replace_args", true)
	}
	if d.ReplaceEnv {
		e.Bool(2, "replace_env", true)
	}
	if d.EmbeddedRegistry {
		e.Bool(2, "embedded_registry", true)
	}
}

// Unmarshal decodes a document into the model. Keys the model does not know
// are ignored; see UnmarshalStrict.
func Unmarshal(data []byte) (*Config, error) {
	return unmarshal(data, false)
}

// UnmarshalStrict decodes a document and fails on keys the model does not
// know.
func UnmarshalStrict(data []byte) (*Config, error) {
	return unmarshal(data, true)
}

func unmarshal(data []byte, strict bool) (*Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(strict)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding cloud-config: %w", err)
	}
	return &c, nil
}

// HasHeader reports whether data starts with the #cloud-config header line.
func HasHeader(data []byte) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return string(bytes.TrimRight(line, " \t\r")) == Header
}
