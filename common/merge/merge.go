package merge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Header is the first line of every merged document.
const Header = "#cloud-config"

// Position says where a fragment's list items go relative to the base.
type Position string

const (
	// Append puts list items after the base document's (the default).
	Append Position = "append"
	// Prepend puts list items before the base document's.
	Prepend Position = "prepend"
)

// Fragment is a user-supplied cloud-config document to merge.
type Fragment struct {
	// Name identifies the fragment in errors.
	Name string
	// Position is Append (also when empty) or Prepend.
	Position Position
	// Content is a YAML map, usually starting with #cloud-config.
	Content []byte
}

// Source names where a value came from.
type Source struct {
	Name string
	// Fragment is true for fragments, false for the base document (or a
	// named value tree in MergeValues).
	Fragment bool
}

func (s Source) String() string {
	if s.Fragment {
		return fmt.Sprintf("fragment %q", s.Name)
	}
	return fmt.Sprintf("%q", s.Name)
}

// ConflictError reports a key or a file set by two sources.
type ConflictError struct {
	// Key is the dotted key path (empty for file conflicts).
	Key string
	// File is the conflicting file path (empty for key conflicts).
	File string
	// First set the value before Second tried to.
	First, Second Source
	// FirstKind and SecondKind are "map", "list" or "scalar" when the
	// conflict is a type mismatch, empty otherwise.
	FirstKind, SecondKind string
}

func (e *ConflictError) Error() string {
	if e.File != "" {
		return fmt.Sprintf("file %q is written by both %s and %s", e.File, e.First, e.Second)
	}
	if e.FirstKind != "" && e.FirstKind != e.SecondKind {
		return fmt.Sprintf("key %q is set by both %s (%s) and %s (%s)", e.Key, e.First, e.FirstKind, e.Second, e.SecondKind)
	}
	return fmt.Sprintf("key %q is set by both %s and %s", e.Key, e.First, e.Second)
}

// Merge merges fragments into base and returns the combined document. base is
// named baseName in errors (the renderer uses "generated").
func Merge(base []byte, baseName string, fragments ...Fragment) ([]byte, error) {
	baseSrc := Source{Name: baseName}
	root, err := parseMap(base, baseSrc)
	if err != nil {
		return nil, err
	}

	type parsed struct {
		src  Source
		pos  Position
		root *yaml.Node
	}
	frags := make([]parsed, 0, len(fragments))
	for i, f := range fragments {
		name := f.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		src := Source{Name: name, Fragment: true}
		pos := f.Position
		switch pos {
		case "":
			pos = Append
		case Append, Prepend:
		default:
			return nil, fmt.Errorf("%s: unknown position %q (want %q or %q)", src, f.Position, Append, Prepend)
		}
		froot, err := parseMap(f.Content, src)
		if err != nil {
			return nil, err
		}
		frags = append(frags, parsed{src: src, pos: pos, root: froot})
	}

	// Files first: two sources writing one path is the more specific error.
	owners := map[string]Source{}
	for _, p := range filePaths(root) {
		owners[p] = baseSrc
	}
	for _, f := range frags {
		for _, p := range filePaths(f.root) {
			if first, ok := owners[p]; ok {
				return nil, &ConflictError{File: p, First: first, Second: f.src}
			}
			owners[p] = f.src
		}
	}

	m := &merger{origin: map[*yaml.Node]Source{}, prepended: map[*yaml.Node]int{}, base: baseSrc}
	for _, f := range frags {
		if err := m.mergeMap(root, f.root, "", f.src, f.pos); err != nil {
			return nil, err
		}
	}

	var out bytes.Buffer
	out.Grow(len(base) + 256)
	out.WriteString(Header)
	out.WriteByte('\n')
	if len(root.Content) == 0 {
		out.WriteString("{}\n")
		return out.Bytes(), nil
	}
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encoding merged cloud-config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding merged cloud-config: %w", err)
	}
	return out.Bytes(), nil
}

// parseMap parses a single YAML document whose root must be a map (an empty
// document counts as an empty map), expands aliases and removes the
// #cloud-config header comment.
func parseMap(data []byte, src Source) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not valid YAML: %w", src, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s holds more than one YAML document", src)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s is not a YAML map (it is a %s)", src, kindOf(resolveAlias(root)))
	}
	budget := maxNodes
	root, err = expand(root, src, 0, &budget)
	if err != nil {
		return nil, err
	}
	root.HeadComment = stripHeader(doc.HeadComment + joinComment(root.HeadComment))
	if len(root.Content) > 0 {
		root.Content[0].HeadComment = stripHeader(root.Content[0].HeadComment)
	}
	if err := checkKeys(root, "", src); err != nil {
		return nil, err
	}
	return root, nil
}

func joinComment(c string) string {
	if c == "" {
		return ""
	}
	return "\n" + c
}

// stripHeader removes #cloud-config lines from a comment block.
func stripHeader(c string) string {
	if !strings.Contains(c, Header) {
		return strings.Trim(c, "\n")
	}
	var keep []string
	for _, line := range strings.Split(c, "\n") {
		if strings.TrimSpace(line) == Header {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Trim(strings.Join(keep, "\n"), "\n")
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// maxNodes bounds the size of a document once its aliases are expanded, so a
// fragment built as an alias bomb cannot exhaust the controller's memory.
const maxNodes = 200_000

// expand returns a copy of n with aliases replaced by copies of their targets,
// merge keys (<<) applied and anchors removed. budget counts the nodes still
// allowed.
func expand(n *yaml.Node, src Source, depth int, budget *int) (*yaml.Node, error) {
	if depth > 1000 {
		return nil, fmt.Errorf("%s nests too deeply", src)
	}
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("%s is too large once its YAML aliases are expanded", src)
	}
	if n.Kind == yaml.AliasNode {
		target := resolveAlias(n)
		c, err := expand(target, src, depth+1, budget)
		if err != nil {
			return nil, err
		}
		// Keep the comments written at the alias, not at the anchor.
		c.HeadComment, c.LineComment, c.FootComment = n.HeadComment, n.LineComment, n.FootComment
		return c, nil
	}
	c := *n
	c.Anchor = ""
	c.Alias = nil
	if len(n.Content) == 0 {
		c.Content = nil
		return &c, nil
	}
	c.Content = make([]*yaml.Node, 0, len(n.Content))
	if n.Kind != yaml.MappingNode {
		for _, child := range n.Content {
			cc, err := expand(child, src, depth+1, budget)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, cc)
		}
		return &c, nil
	}
	// Mapping: explicit keys win over merged ones; earlier merged maps win
	// over later ones.
	explicit := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if !isMergeKey(n.Content[i]) {
			explicit[n.Content[i].Value] = true
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMergeKey(k) {
			kc, err := expand(k, src, depth+1, budget)
			if err != nil {
				return nil, err
			}
			vc, err := expand(v, src, depth+1, budget)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, kc, vc)
			continue
		}
		var maps []*yaml.Node
		switch rv := resolveAlias(v); rv.Kind {
		case yaml.MappingNode:
			maps = append(maps, rv)
		case yaml.SequenceNode:
			for _, item := range rv.Content {
				ri := resolveAlias(item)
				if ri.Kind != yaml.MappingNode {
					return nil, fmt.Errorf("%s: line %d: merge key (<<) must refer to maps", src, k.Line)
				}
				maps = append(maps, ri)
			}
		default:
			return nil, fmt.Errorf("%s: line %d: merge key (<<) must refer to a map", src, k.Line)
		}
		for _, mm := range maps {
			em, err := expand(mm, src, depth+1, budget)
			if err != nil {
				return nil, err
			}
			for j := 0; j+1 < len(em.Content); j += 2 {
				key := em.Content[j].Value
				if explicit[key] {
					continue
				}
				explicit[key] = true
				c.Content = append(c.Content, em.Content[j], em.Content[j+1])
			}
		}
	}
	return &c, nil
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// checkKeys rejects non-scalar keys and keys repeated within one map: yip
// refuses such a document as a whole.
func checkKeys(n *yaml.Node, p string, src Source) error {
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s: line %d: only scalar keys are supported", src, k.Line)
			}
			kp := join(p, k.Value)
			if seen[k.Value] {
				return fmt.Errorf("%s sets key %q twice", src, kp)
			}
			seen[k.Value] = true
			if err := checkKeys(n.Content[i+1], kp, src); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			if err := checkKeys(item, fmt.Sprintf("%s[%d]", p, i), src); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "map"
	case yaml.SequenceNode:
		return "list"
	default:
		return "scalar"
	}
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// filePaths lists the files a document writes, cleaned and de-duplicated, in
// document order.
func filePaths(root *yaml.Node) []string {
	var out []string
	seen := map[string]bool{}
	add := func(list *yaml.Node) {
		if list == nil || list.Kind != yaml.SequenceNode {
			return
		}
		for _, item := range list.Content {
			p := lookup(item, "path")
			if p == nil || p.Kind != yaml.ScalarNode || p.Value == "" {
				continue
			}
			clean := path.Clean(p.Value)
			if !seen[clean] {
				seen[clean] = true
				out = append(out, clean)
			}
		}
	}
	add(lookup(root, "write_files"))
	if stages := lookup(root, "stages"); stages != nil && stages.Kind == yaml.MappingNode {
		for i := 1; i < len(stages.Content); i += 2 {
			steps := stages.Content[i]
			if steps.Kind != yaml.SequenceNode {
				continue
			}
			for _, step := range steps.Content {
				add(lookup(step, "files"))
				add(lookup(step, "downloads"))
			}
		}
	}
	return out
}

type merger struct {
	base Source
	// origin records which fragment added a node; nodes of the base are
	// absent.
	origin map[*yaml.Node]Source
	// prepended counts the items of a list that prepend fragments added, so
	// that the next prepend fragment's items follow them.
	prepended map[*yaml.Node]int
}

func (m *merger) originOf(n *yaml.Node) Source {
	if s, ok := m.origin[n]; ok {
		return s
	}
	return m.base
}

// claim records that src added n and everything below it. Lists added by a
// prepend fragment count as prepended, so that a later prepend fragment's
// items go after them.
func (m *merger) claim(n *yaml.Node, src Source, pos Position) {
	m.origin[n] = src
	if n.Kind == yaml.SequenceNode && pos == Prepend {
		m.prepended[n] = len(n.Content)
	}
	for _, c := range n.Content {
		m.claim(c, src, pos)
	}
}

func (m *merger) mergeMap(dst, src *yaml.Node, p string, s Source, pos Position) error {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		kp := join(p, k.Value)
		var dv *yaml.Node
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k.Value {
				dv = dst.Content[j+1]
				break
			}
		}
		if dv == nil {
			dst.Content = append(dst.Content, k, v)
			m.claim(v, s, pos)
			continue
		}
		if dv.Kind != v.Kind || v.Kind == yaml.ScalarNode {
			ce := &ConflictError{Key: kp, First: m.originOf(dv), Second: s}
			if dv.Kind != v.Kind {
				ce.FirstKind, ce.SecondKind = kindOf(dv), kindOf(v)
			}
			return ce
		}
		switch v.Kind {
		case yaml.MappingNode:
			if err := m.mergeMap(dv, v, kp, s, pos); err != nil {
				return err
			}
		case yaml.SequenceNode:
			for _, item := range v.Content {
				m.claim(item, s, pos)
			}
			if pos == Prepend {
				at := m.prepended[dv]
				dv.Content = append(dv.Content[:at], append(append([]*yaml.Node(nil), v.Content...), dv.Content[at:]...)...)
				m.prepended[dv] = at + len(v.Content)
			} else {
				dv.Content = append(dv.Content, v.Content...)
			}
		}
	}
	return nil
}
