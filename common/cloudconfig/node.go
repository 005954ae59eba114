package cloudconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kairos-capi/kairos-capi/common/syntax"
	yipschema "github.com/mudler/yip/pkg/schema"
	yipcloudinit "github.com/mudler/yip/pkg/schema/cloudinit"
	"go.yaml.in/yaml/v3"
)

// Problem is one way a Kairos node would misread a document: the key path
// (for example "stages.boot[0].files[1].permissions"; empty for the document
// as a whole) and what goes wrong.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// The decoding below uses yip's own types (github.com/mudler/yip
// pkg/schema and pkg/schema/cloudinit, the version in go.mod), because yip
// is what reads the document on the node: the Kairos agent hands every
// config source to yip's schema.Load. What matters, from yip v1.25.1
// pkg/schema/loader_cloudinit.go:
//
//   - A "#cloud-config" document is first decoded as a cloudinit.CloudConfig
//     (users, write_files, runcmd, hostname, ssh_authorized_keys, growpart).
//     A type error there (groups as a string, say) fails schema.Load: the
//     node applies nothing of the document.
//   - write_files permissions are parsed as octal text; anything else fails
//     schema.Load too.
//   - users become a map keyed by name: a second user with the same name
//     silently replaces the first.
//   - The stages are decoded separately into schema.YipConfig, and when that
//     fails (a quoted "0644" for a uint32 permissions field) the loader drops
//     every stage of the document and keeps only the cloud-init keys,
//     without a word on the node.
//
// yip ignores keys it does not know (owner_string instead of ownerstring,
// a typo in a step). Those do nothing on the node, so they are reported too.

// CheckNode decodes a complete document the way a Kairos node does and
// returns every problem found (nil when the node would apply all of it).
// Beyond the path-by-path checks it runs yip's own loader on the document, so
// nothing yip refuses can pass.
func CheckNode(doc []byte) []Problem {
	c := newNodeCheck()
	c.run(doc, false)
	return c.problems
}

// CheckFragment applies the checks of CheckNode to a fragment that will be
// merged into a document: the "#cloud-config" header is not required (the
// merged document has it) and yip's loader is not run on the fragment alone.
func CheckFragment(doc []byte) []Problem {
	c := newNodeCheck()
	c.run(doc, true)
	return c.problems
}

// UserDefinition is where a document defines an OS user.
type UserDefinition struct {
	Name string
	// Path is the key path of the definition: users[i] or
	// stages.<stage>[j].users.<name>.
	Path string
}

// Users lists the users a document defines, in document order: the
// top-level users list (which yip turns into a map keyed by name) and every
// stage step's users map. Entries that cannot be read are skipped: CheckNode
// reports them.
func Users(doc []byte) []UserDefinition {
	root, err := parseRoot(doc)
	if err != nil || root == nil {
		return nil
	}
	return usersOf(root)
}

type nodeCheck struct {
	// fragment: a user's fragment, whose numbers must mean what they look like (literal).
	fragment bool
	problems []Problem
	// seen avoids reporting one path twice (the path-by-path walk and yip's
	// loader may find the same thing).
	seen map[string]bool
}

func newNodeCheck() *nodeCheck { return &nodeCheck{seen: map[string]bool{}} }

func (c *nodeCheck) add(path, format string, args ...any) {
	p := Problem{Path: path, Message: fmt.Sprintf(format, args...)}
	key := p.String()
	if c.seen[key] {
		return
	}
	c.seen[key] = true
	c.problems = append(c.problems, p)
}

// cloudInitKeys are the top-level keys yip's cloud-init loader reads, with
// the type it decodes each into (yip pkg/schema/cloudinit CloudConfig).
var cloudInitKeys = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	t := reflect.TypeFor[yipcloudinit.CloudConfig]()
	for i := 0; i < t.NumField(); i++ {
		if name, ok := yamlName(t.Field(i)); ok {
			out[name] = t.Field(i).Type
		}
	}
	return out
}()

var (
	stageType      = reflect.TypeFor[yipschema.Stage]()
	cloudInitUser  = reflect.TypeFor[yipcloudinit.User]()
	cloudInitFile  = reflect.TypeFor[yipcloudinit.File]()
	errNotAMapping = errors.New("not a mapping")
)

func parseRoot(doc []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var d yaml.Node
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("holds more than one YAML document (a node reads only the first)")
	}
	root := &d
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, errNotAMapping
	}
	return root, nil
}

func (c *nodeCheck) run(doc []byte, fragment bool) {
	c.fragment = fragment
	root, err := parseRoot(doc)
	switch {
	case errors.Is(err, errNotAMapping):
		c.add("", "the document must be a YAML mapping of keys (users, stages, ...)")
		return
	case err != nil:
		c.add("", "is not valid YAML: %s", yamlMessage(err))
		return
	}
	if !fragment && !yipcloudinit.IsCloudConfig(string(doc)) {
		c.add("", "the first line must be %q: without it the node ignores users, write_files, runcmd and hostname", Header)
	}
	if root == nil {
		return
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch key := k.Value; {
		case key == "stages":
			c.stages(v)
		case key == "name":
			c.decode(v, reflect.TypeFor[string](), "name")
		case cloudInitKeys[key] != nil:
			c.decode(v, cloudInitKeys[key], key)
		}
	}
	c.duplicateKeys(root, "")
	c.uniqueUsers(usersOf(root))
	c.writeFilePermissions(root)
	if !fragment && len(c.problems) == 0 {
		c.yip(doc)
	}
}

// yip runs yip's own loader: whatever it refuses, the path-by-path checks
// above must have missed, and it is still refused.
func (c *nodeCheck) yip(doc []byte) {
	if _, err := yipschema.Load(string(doc), nil, nil, nil); err != nil {
		c.add("", "yip cannot load the document, so the node would apply none of it: %v", err)
		return
	}
	var stages yipschema.YipConfig
	if err := yaml.Unmarshal(doc, &stages); err != nil {
		c.add("stages", "yip cannot decode the stages, so the node would silently drop every stage: %s", yamlMessage(err))
	}
}

func (c *nodeCheck) stages(v *yaml.Node) {
	v = resolve(v)
	if isNull(v) {
		return
	}
	if v.Kind != yaml.MappingNode {
		c.add("stages", "must map stage names (boot, network, ...) to lists of steps, not a %s: yip would drop every stage", kindName(v))
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		name, steps := v.Content[i].Value, resolve(v.Content[i+1])
		path := "stages." + name
		if isNull(steps) {
			continue
		}
		if steps.Kind != yaml.SequenceNode {
			c.add(path, "must be a list of steps, not a %s: yip would drop every stage", kindName(steps))
			continue
		}
		for j, step := range steps.Content {
			c.decode(step, stageType, fmt.Sprintf("%s[%d]", path, j))
		}
	}
}

// decode checks that n decodes into a value of type t exactly, reporting
// every field path that does not (a wrong type, an unknown key).
func (c *nodeCheck) decode(n *yaml.Node, t reflect.Type, path string) {
	n = resolve(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.add(path, "must be a mapping, not a %s", kindName(n))
			return
		}
		fields := structFields(t)
		c.eachPair(n, func(k, v *yaml.Node) {
			f, ok := fields[k.Value]
			if !ok {
				c.add(join(path, k.Value), "is not a key yip knows here, so the node ignores it%s", unknownKeyHint(t, k.Value))
				return
			}
			c.decode(v, f, join(path, k.Value))
		})
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			c.scalar(n, t, path)
			return
		}
		if n.Kind != yaml.SequenceNode {
			c.add(path, "must be a YAML list, not a %s%s", kindName(n), listHint(path, n))
			return
		}
		for i, item := range n.Content {
			c.decode(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.add(path, "must be a mapping, not a %s", kindName(n))
			return
		}
		c.eachPair(n, func(k, v *yaml.Node) {
			c.scalar(k, t.Key(), path+" key "+strconv.Quote(k.Value))
			c.decode(v, t.Elem(), join(path, k.Value))
		})
	case reflect.Interface:
	default:
		c.scalar(n, t, path)
	}
}

// eachPair calls fn for the key-value pairs of a mapping, expanding merge
// keys (<<) as yip's decoder does.
func (c *nodeCheck) eachPair(n *yaml.Node, fn func(k, v *yaml.Node)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			switch rv := resolve(v); rv.Kind {
			case yaml.MappingNode:
				c.eachPair(rv, fn)
			case yaml.SequenceNode:
				for _, item := range rv.Content {
					if ri := resolve(item); ri.Kind == yaml.MappingNode {
						c.eachPair(ri, fn)
					}
				}
			}
			continue
		}
		fn(k, v)
	}
}

// scalar decodes a scalar node into a fresh value of type t with the YAML
// decoder yip uses.
func (c *nodeCheck) scalar(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.ScalarNode {
		c.add(path, "must be a single value, not a %s", kindName(n))
		return
	}
	v := reflect.New(t)
	if err := n.Decode(v.Interface()); err != nil {
		if t.Kind() == reflect.Uint32 && strings.HasSuffix(path, "permissions") && n.ShortTag() == "!!str" {
			c.add(path, "must be an unquoted YAML integer such as 0644, not the string %q: yip cannot decode it and the node then drops every stage of this document", n.Value)
			return
		}
		c.add(path, "must be %s, not a %s", wanted(t), kindName(n))
		return
	}
	switch {
	case isInteger(t):
		if c.fragment && c.literal(n, v.Elem(), path) {
			return
		}
		c.applied(v.Elem(), path)
	case t.Kind() == reflect.String:
		c.text(v.Elem().String(), path)
	}
}

func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// literal refuses a whole number that yip decodes leniently into something other than what it
// looks like. yip decodes with go-yaml v3, which reads a number the way Go's strconv does with
// base 0 after dropping underscores: 0644 and 01000 are octal (420, 512), 0x1ff hexadecimal,
// 1_000 is 1000, and a whole float such as 420.0 or 6.4e2 is accepted for an integer field.
// Modes (permissions) are meant in octal: written in decimal (644), yip takes the decimal
// number, another mode altogether.
// It reports whether it refused the number.
func (c *nodeCheck) literal(n *yaml.Node, v reflect.Value, path string) bool {
	var got uint64
	if v.CanUint() {
		got = v.Uint()
	} else {
		got = uint64(v.Int())
	}
	text := strings.TrimLeft(n.Value, "+-")
	mode := strings.HasSuffix(path, "permissions")
	leadingZero := len(text) > 1 && text[0] == '0' && text[1] >= '0' && text[1] <= '9'
	switch {
	case mode && n.ShortTag() == "!!float" && leadingZero && !strings.ContainsAny(text, ".eE"):
		// 0648: not octal (8 and 9 are no octal digits), so go-yaml falls back to a float.
		c.add(path, "%q is not an octal number (8 and 9 are not octal digits): yip reads it as the decimal number %d (mode %#o)", n.Value, got, got)
	case n.ShortTag() == "!!float":
		c.add(path, "write the whole number itself, not %q: yip reads it as %d", n.Value, got)
	case strings.Contains(text, "_"):
		c.add(path, "write the number without underscores, not %q: yip reads it as %d", n.Value, got)
	case mode && len(text) > 1 && text[0] != '0':
		c.add(path, "a mode is octal: write it with a leading zero (0644), not %q, which yip reads as the decimal number %d (mode %#o)", n.Value, got, got)
	case !mode && leadingZero:
		c.add(path, "write %q without the leading zero: yip reads it as the octal number %d", n.Value, got)
	default:
		return false
	}
	return true
}

// applied refuses a whole number that yip decodes as written but then applies as something
// else: a mode with bits beyond 0777, an owner or group outside the kernel's 32-bit ids, a
// download timeout or a partition size that overflows when yip converts it. The renderer never
// writes such values, so whole documents are checked too.
func (c *nodeCheck) applied(v reflect.Value, path string) {
	var got int64
	if v.CanUint() {
		if v.Uint() > math.MaxInt64 {
			got = math.MaxInt64
		} else {
			got = int64(v.Uint())
		}
	} else {
		got = v.Int()
	}
	switch {
	case strings.HasSuffix(path, ".permissions"):
		c.mode(uint64(got), path)
	case strings.HasSuffix(path, ".owner") || strings.HasSuffix(path, ".group"):
		switch {
		case got == -1 || got == syntax.MaxID+1:
			c.add(path, "%d is not an id: chown reads it as \"leave unchanged\" (root for a file yip creates); write the id (0 for root)", got)
		case got < 0 || got > syntax.MaxID:
			c.add(path, "an id is a number from 0 to %d: the kernel keeps its low 32 bits, so yip's chown sets %d, not %d", syntax.MaxID, uint32(got), got)
		}
	case strings.HasSuffix(path, ".timeout") && strings.Contains(path, "downloads["):
		if got > math.MaxInt64/int64(time.Second) {
			d := time.Duration(got) * time.Second
			what := "no timeout at all"
			if d > 0 {
				what = "a timeout of " + d.String()
			}
			c.add(path, "%d seconds overflows when yip turns it into a duration (%d s at most): the download gets %s", got, math.MaxInt64/int64(time.Second), what)
		}
	case strings.HasSuffix(path, ".size") && strings.Contains(path, ".layout."):
		if size := v.Uint(); size >= 1<<44 {
			wrapped := size & (1<<44 - 1)
			what := fmt.Sprintf("%d MiB", wrapped)
			if wrapped == 0 {
				what = "0, which yip reads as all the space left"
			}
			c.add(path, "%d MiB overflows when yip converts it to bytes (64 bits, %d MiB at most): the size becomes %s", size, uint64(1<<44-1), what)
		}
	}
}

// mode refuses a file mode that yip does not apply as written: yip hands it to chmod as Go's
// os.FileMode, which keeps only the permission bits 0777; its setuid, setgid and sticky bits
// are 1<<23, 1<<22 and 1<<20, not 04000, 02000 and 01000.
func (c *nodeCheck) mode(m uint64, path string) {
	applied := m & 0o777
	for bit, unix := range map[uint64]uint64{1 << 23: 0o4000, 1 << 22: 0o2000, 1 << 20: 0o1000} {
		if m&bit != 0 {
			applied |= unix
		}
	}
	if applied != m {
		c.add(path, "yip applies only the permission bits 0777 of a mode (as Go's os.FileMode, whose setuid, setgid and sticky bits are not 04000, 02000 and 01000): %#o is applied as %#o; set special bits with a command", m, applied)
	}
}

// text checks string fields that yip, or the node, reads as numbers or ids after decoding.
func (c *nodeCheck) text(s, path string) {
	if s == "" || strings.Contains(s, "{{") {
		return // empty means unset; a template is rendered on the node first
	}
	switch {
	case strings.HasSuffix(path, ".uid") && (strings.HasPrefix(path, "users[") || strings.Contains(path, "].users.")):
		c.uid(s, path)
	case strings.HasSuffix(path, ".ownerstring") ||
		(strings.HasSuffix(path, ".owner") && strings.HasPrefix(path, "write_files[")):
		c.ownerString(s, path)
	case strings.HasSuffix(path, ".entity") && strings.Contains(path, "_entities["):
		c.entity(s, path)
	case strings.Contains(path, "].sysctl."):
		c.sysctl(s, path)
	}
}

// uid: yip reads a user's uid with strconv.Atoi (plugins/user.go), decimal only, and does not
// create the user when that fails or gives -1.
func (c *nodeCheck) uid(s, path string) {
	id, err := strconv.Atoi(s)
	text := strings.TrimLeft(s, "+-")
	switch {
	case err != nil:
		c.add(path, "%q is not a decimal uid: yip reads the uid with strconv.Atoi, fails, and does not create the user", s)
	case id < 0 || id > syntax.MaxID:
		c.add(path, "a uid is a number from 0 to %d, not %q: yip does not create the user, or gives it an id the kernel cannot hold", syntax.MaxID, s)
	case len(text) > 1 && text[0] == '0':
		c.add(path, "write %q without the leading zero: yip reads the uid as the decimal number %d, not the octal one a YAML integer would be", s, id)
	}
}

// ownerString: yip resolves "user:group" (or "user") through the node's user database by name
// (utils.GetUserDataFromString, os/user.Lookup): a number there is looked up as a name, not
// taken as an id, the lookup fails and the file keeps root as its owner.
func (c *nodeCheck) ownerString(s, path string) {
	user, group, _ := strings.Cut(s, ":")
	for _, part := range []struct{ what, value string }{{"user", user}, {"group", group}} {
		if part.value == "" || strings.Trim(part.value, "0123456789") != "" {
			continue
		}
		hint := "use the numeric owner and group keys of a stage file instead"
		if strings.HasPrefix(path, "stages.") {
			hint = "write the ids as owner and group instead"
		}
		c.add(path, "yip looks %q up as a %s name, not an id: the node has no %s of that name, so the file keeps root as its owner; %s", part.value, part.what, part.what, hint)
		return
	}
}

// Entities (yip ensure_entities and delete_entities, github.com/mudler/entities) are YAML
// documents of their own, read with the same decoder as the stages; the types mirror those of
// entities v0.8.3 (pkg/entities), kind included.
type (
	entityUser struct {
		Kind     string `yaml:"kind"`
		Username string `yaml:"username"`
		Password string `yaml:"password"`
		Uid      int    `yaml:"uid"`
		Gid      int    `yaml:"gid"`
		Group    string `yaml:"group"`
		Info     string `yaml:"info"`
		Homedir  string `yaml:"homedir"`
		Shell    string `yaml:"shell"`
	}
	entityShadow struct {
		Kind           string `yaml:"kind"`
		Username       string `yaml:"username"`
		Password       string `yaml:"password"`
		LastChanged    string `yaml:"last_changed"`
		MinimumChanged string `yaml:"minimum_changed"`
		MaximumChanged string `yaml:"maximum_changed"`
		Warn           string `yaml:"warn"`
		Inactive       string `yaml:"inactive"`
		Expire         string `yaml:"expire"`
		Reserved       string `yaml:"reserved"`
	}
	entityGroup struct {
		Kind     string `yaml:"kind"`
		Name     string `yaml:"group_name"`
		Password string `yaml:"password"`
		Gid      *int   `yaml:"gid"`
		Users    string `yaml:"users"`
	}
	entityGShadow struct {
		Kind           string `yaml:"kind"`
		Name           string `yaml:"name"`
		Password       string `yaml:"password"`
		Administrators string `yaml:"administrators"`
		Members        string `yaml:"members"`
	}
)

var entityKinds = map[string]reflect.Type{
	"user":    reflect.TypeFor[entityUser](),
	"shadow":  reflect.TypeFor[entityShadow](),
	"group":   reflect.TypeFor[entityGroup](),
	"gshadow": reflect.TypeFor[entityGShadow](),
}

// entity checks an entity document the way the node reads it; its paths continue the entity's
// path (stages.boot[0].ensure_entities[0].entity.uid).
func (c *nodeCheck) entity(s, path string) {
	root, err := parseRoot([]byte(s))
	switch {
	case errors.Is(err, errNotAMapping):
		c.add(path, "must be a YAML mapping (kind, username, uid, ...): the node does not apply it")
		return
	case err != nil:
		c.add(path, "is not valid YAML, so the node does not apply it: %s", yamlMessage(err))
		return
	}
	kind := lookup(root, "kind")
	if kind == nil || entityKinds[kind.Value] == nil {
		got := ""
		if kind != nil {
			got = kind.Value
		}
		c.add(join(path, "kind"), "must be user, shadow, group or gshadow, not %q: the node does not apply the entity", got)
		return
	}
	c.decode(root, entityKinds[kind.Value], path)
}

// sysctl: yip writes the value to /proc/sys as it is, and the kernel reads numbers with base 0
// (proc_dointvec): 010 is 8, and 08 is refused.
func (c *nodeCheck) sysctl(s, path string) {
	fields := strings.Fields(s)
	for _, f := range fields {
		if strings.Trim(strings.TrimPrefix(f, "-"), "0123456789") != "" {
			return // not a list of numbers: a string setting
		}
	}
	for _, f := range fields {
		digits := strings.TrimPrefix(f, "-")
		if len(digits) < 2 || digits[0] != '0' {
			continue
		}
		if v, err := strconv.ParseInt(f, 0, 64); err == nil {
			c.add(path, "write %q without the leading zero: the kernel reads it as the octal number %d", f, v)
		} else {
			c.add(path, "write %q without the leading zero: the kernel reads a leading zero as octal and refuses it", f)
		}
		return
	}
}

func wanted(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an unquoted non-negative whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a " + t.String()
}

// writeFilePermissions checks what yip's cloud-init loader parses as octal
// text (loader_cloudinit.go parseOctal): a failure there fails the load.
func (c *nodeCheck) writeFilePermissions(root *yaml.Node) {
	wf := lookup(root, "write_files")
	if wf == nil || wf.Kind != yaml.SequenceNode {
		return
	}
	for i, item := range wf.Content {
		p := lookup(resolve(item), "permissions")
		if p == nil || p.Kind != yaml.ScalarNode || p.Value == "" {
			continue
		}
		path := fmt.Sprintf("write_files[%d].permissions", i)
		m, err := strconv.ParseUint(p.Value, 8, 32)
		if err != nil {
			c.add(path, "%q is not an octal file mode such as \"0644\": yip would refuse the whole document", p.Value)
			continue
		}
		c.mode(m, path)
	}
}

// duplicateKeys reports keys repeated within one mapping: YAML decoders
// refuse such documents.
func (c *nodeCheck) duplicateKeys(n *yaml.Node, path string) {
	n = resolve(n)
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.ShortTag() == "!!merge" {
				continue
			}
			if seen[k.Value] {
				c.add(join(path, k.Value), "is set twice in one mapping")
			}
			seen[k.Value] = true
			c.duplicateKeys(n.Content[i+1], join(path, k.Value))
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			c.duplicateKeys(item, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func (c *nodeCheck) uniqueUsers(users []UserDefinition) {
	first := map[string]string{}
	for _, u := range users {
		if prev, ok := first[u.Name]; ok {
			c.add(u.Path, "user %q is already defined at %s: yip keeps one definition per name, so one of them silently replaces the other", u.Name, prev)
			continue
		}
		first[u.Name] = u.Path
	}
}

func usersOf(root *yaml.Node) []UserDefinition {
	var out []UserDefinition
	if users := lookup(root, "users"); users != nil && users.Kind == yaml.SequenceNode {
		for i, item := range users.Content {
			if name := lookup(resolve(item), "name"); name != nil && name.Kind == yaml.ScalarNode {
				out = append(out, UserDefinition{Name: name.Value, Path: fmt.Sprintf("users[%d]", i)})
			}
		}
	}
	stages := lookup(root, "stages")
	if stages == nil || stages.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(stages.Content); i += 2 {
		stage, steps := stages.Content[i].Value, resolve(stages.Content[i+1])
		if steps.Kind != yaml.SequenceNode {
			continue
		}
		for j, step := range steps.Content {
			users := lookup(resolve(step), "users")
			if users == nil || users.Kind != yaml.MappingNode {
				continue
			}
			keys := make([]string, 0, len(users.Content)/2)
			for k := 0; k+1 < len(users.Content); k += 2 {
				keys = append(keys, users.Content[k].Value)
			}
			sort.Strings(keys) // yip's map has no order; keep reports stable
			for _, name := range keys {
				out = append(out, UserDefinition{Name: name, Path: fmt.Sprintf("stages.%s[%d].users.%s", stage, j, name)})
			}
		}
	}
	return out
}

// structFields maps the YAML keys of a struct type to the field types, the
// way yaml.v3 does: the yaml tag's name, or the lower-cased field name.
func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if strings.Contains(tag, ",inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name, ok := yamlName(f); ok {
			out[name] = f.Type
		}
	}
	return out
}

func yamlName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("yaml")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, true
}

// unknownKeyHint names the key the user probably meant.
func unknownKeyHint(t reflect.Type, key string) string {
	switch {
	case key == "owner_string" || key == "owner-string":
		return ` (the "user:group" owner key of stage files is "ownerstring")`
	case t == cloudInitUser && key == "sudo":
		return " (Kairos does not read sudo: add the user to a group that may use sudo, such as admin)"
	case t == cloudInitFile && key == "defer":
		return " (Kairos writes write_files in the boot stage, after users exist only within stages)"
	}
	return ""
}

func listHint(path string, n *yaml.Node) string {
	if strings.HasSuffix(path, ".groups") && n.Kind == yaml.ScalarNode {
		return ` such as [admin, users]: a comma-separated string makes yip refuse the whole document`
	}
	return ""
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return resolve(m.Content[i+1])
		}
	}
	return nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	default:
		if n.ShortTag() == "!!str" {
			return fmt.Sprintf("string (%q)", truncate(n.Value))
		}
		return fmt.Sprintf("single value (%s)", truncate(n.Value))
	}
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlMessage drops the "yaml: " prefix and yaml.v3's type names, which mean
// nothing to someone writing cloud-config.
func yamlMessage(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n  ")
	return strings.ReplaceAll(s, "\n  ", "; ")
}
